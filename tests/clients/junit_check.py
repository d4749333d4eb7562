"""Validates `agentsim check --junit` against tests/clients/junit.xsd with xmlschema (a validator
nobody here wrote), on the whole scenario corpus and on a corpus with a passing, a failing, a
broken and an oddly named scenario, and checks the counts agree with `check --format json`.

Usage: python tests/clients/junit_check.py path/to/agentsim
"""

import json
import os
import subprocess
import sys
import tempfile

import xmlschema

AGENTSIM = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "target/release/agentsim"
HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = xmlschema.XMLSchema(os.path.join(HERE, "junit.xsd"))


def check(paths, junit):
    out = subprocess.run([AGENTSIM, "check", *paths, "--junit", junit, "--format", "json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def validate(junit, report):
    SCHEMA.validate(junit)
    doc = SCHEMA.to_dict(junit)
    assert doc["@tests"] == len(report["scenarios"]), (doc["@tests"], len(report["scenarios"]))
    loads = sum(1 for s in report["scenarios"]
                if not s["passed"] and s["failure"]["kind"] == "load")
    assert doc["@errors"] == loads
    assert doc["@failures"] == report["failed"] - loads
    cases = [c for suite in doc.get("testsuite", []) for c in suite.get("testcase", [])]
    assert len(cases) == len(report["scenarios"])
    return cases


def main():
    with tempfile.TemporaryDirectory(prefix="agentsim-junit-") as tmp:
        junit = os.path.join(tmp, "corpus.xml")
        report = check(["scenarios"], junit)
        validate(junit, report)
        print("ok   the scenario corpus: %d cases valid" % len(report["scenarios"]))

        corpus = os.path.join(tmp, "mixed")
        os.makedirs(os.path.join(corpus, "sub"))
        files = {
            "ok.yaml": "name: ok\nllm:\n  main: [hello]\nsteps:\n  - user: hi\n",
            "wrong <&> \"quoted\".yaml":
                "name: wrong\nllm:\n  main: [hello]\nsteps:\n  - user: hi\n"
                "  - expect: { sent: [\"good\\u001bbye <&>\"] }\n",
            "sub/broken.yaml": "name: broken\nagents:\n  main: { max_iteration: 3 }\nsteps: []\n",
        }
        for name, text in files.items():
            with open(os.path.join(corpus, name), "w") as f:
                f.write(text)
        junit = os.path.join(tmp, "mixed.xml")
        report = check([corpus], junit)
        cases = validate(junit, report)
        kinds = sorted(k for c in cases for k in ("failure", "error") if k in c)
        assert kinds == ["error", "failure"], cases
        failure = next(c["failure"] for c in cases if "failure" in c)
        assert "rerun: agentsim run" in failure["$"], failure
        assert failure["@type"] == "expectation", failure
        print("ok   a passing, a failing and a broken scenario: valid, with the failure and the error")

        # The schema has teeth: a case without its time, or a count that is not a number, fails.
        with open(junit) as f:
            good = f.read()
        for broken in (good.replace('name="ok" file=', 'file=', 1),
                       good.replace('tests="3"', 'tests="three"', 1)):
            assert broken != good
            try:
                SCHEMA.validate(broken)
            except xmlschema.XMLSchemaValidationError:
                continue
            raise AssertionError("the schema accepted a broken report")
        print("ok   the schema refuses a report with a case unnamed or a count not a number")


if __name__ == "__main__":
    main()
