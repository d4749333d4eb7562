/**
 * Lines from a byte stream, as protocol 1 cuts them: split at `\n`, a `\r` before it dropped,
 * a line over {@link MAX_LINE} bytes reported as such (and the rest of it dropped), never decoded
 * here (the protocol decoder judges UTF-8 per line, so that an invalid byte is located).
 */

import type { Readable } from "node:stream";

import { MAX_LINE } from "./protocol.js";

/** What {@link LineReader.next} gives: a line's bytes, a line that was too long, or the end. */
export type Line = { readonly bytes: Buffer } | { readonly oversize: number } | null;

/** What {@link LineReader.next} gives when its deadline passes first (no line is taken). */
export const TIMED_OUT = "timed-out";

/** Reads a stream into lines, buffering what arrives until someone asks for it. */
export class LineReader {
  private readonly lines: Exclude<Line, null>[] = [];
  private partial: Buffer[] = [];
  private partialLength = 0;
  private skipping = false;
  private ended = false;
  private wake: (() => void) | null = null;

  constructor(stream: Readable) {
    stream.on("data", (chunk: Buffer | string) => {
      this.push(typeof chunk === "string" ? Buffer.from(chunk, "utf-8") : chunk);
    });
    const end = (): void => {
      if (!this.ended && this.partialLength > 0 && !this.skipping) this.finishLine();
      this.ended = true;
      this.notify();
    };
    stream.on("end", end);
    stream.on("close", end);
    stream.on("error", end);
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  private finishLine(): void {
    let line = Buffer.concat(this.partial, this.partialLength);
    this.partial = [];
    this.partialLength = 0;
    if (line.length > 0 && line[line.length - 1] === 0x0d) line = line.subarray(0, line.length - 1);
    if (line.length > MAX_LINE) this.lines.push({ oversize: line.length });
    else this.lines.push({ bytes: line });
  }

  private push(chunk: Buffer): void {
    let start = 0;
    while (start < chunk.length) {
      const newline = chunk.indexOf(0x0a, start);
      const end = newline === -1 ? chunk.length : newline;
      if (!this.skipping) {
        this.partial.push(chunk.subarray(start, end));
        this.partialLength += end - start;
        // One byte of slack for a `\r` before the newline.
        if (this.partialLength > MAX_LINE + 1) {
          this.lines.push({ oversize: this.partialLength });
          this.partial = [];
          this.partialLength = 0;
          this.skipping = true;
        }
      }
      if (newline === -1) break;
      if (this.skipping) this.skipping = false;
      else this.finishLine();
      start = newline + 1;
    }
    this.notify();
  }

  /**
   * The next line, waiting for it; null at the end of the stream; {@link TIMED_OUT} once
   * `deadline` (a `performance.now()` time) passes with no line, leaving the stream as it was.
   */
  async next(deadline?: number): Promise<Line | typeof TIMED_OUT> {
    for (;;) {
      const line = this.lines.shift();
      if (line !== undefined) return line;
      if (this.ended) return null;
      const woke = new Promise<void>((resolve) => {
        this.wake = resolve;
      });
      if (deadline === undefined) {
        await woke;
        continue;
      }
      const left = deadline - performance.now();
      let timer: ReturnType<typeof setTimeout> | undefined;
      const expired = new Promise<typeof TIMED_OUT>((resolve) => {
        timer = setTimeout(() => resolve(TIMED_OUT), Math.max(0, left));
      });
      const won = await Promise.race([woke.then(() => "woke" as const), expired]);
      clearTimeout(timer);
      if (won === TIMED_OUT) {
        this.wake = null;
        return TIMED_OUT;
      }
    }
  }
}
