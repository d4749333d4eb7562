//! The `agentsim` command: run one scenario and print its transcript, check a corpus of
//! scenarios, or print the scenario JSON Schema. The commands live in `cli`, one module each; this
//! file holds the allocator and hands the parsed command line to them.

/// The mock server and its load generator allocate for every request; glibc's allocator spent a
/// third of a benchmark's time under contention, mimalloc far less.
#[cfg(feature = "mock-server")]
#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;

#[cfg(feature = "mock-server")]
mod allocator {
    use std::alloc::{GlobalAlloc, Layout};
    use std::ffi::c_void;

    use libmimalloc_sys::{
        mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc,
        mi_zalloc_aligned,
    };

    /// The alignment of every block mimalloc hands out: its sizes are whole words, and the
    /// first block of a page is aligned to 16.
    const WORD: usize = std::mem::size_of::<usize>();

    /// mimalloc, through its plain entry points wherever they give the alignment asked for.
    /// (Its aligned entry points, which the `mimalloc` crate uses for every request, take a
    /// slower path, and when a size class has no free block at hand they allocate `size +
    /// align - 1` bytes from a larger one: about 60 instructions more an allocation.)
    pub struct MiMalloc;

    // SAFETY: every request whose alignment is at most a word goes to the plain entry points,
    // whose blocks are word-aligned; the others to the aligned ones. Every block is freed
    // with `mi_free`, whichever entry point gave it.
    unsafe impl GlobalAlloc for MiMalloc {
        #[inline]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if layout.align() <= WORD {
                mi_malloc(layout.size()).cast()
            } else {
                mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }

        #[inline]
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            if layout.align() <= WORD {
                mi_zalloc(layout.size()).cast()
            } else {
                mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }

        #[inline]
        unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
            mi_free(ptr.cast::<c_void>());
        }

        #[inline]
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            if layout.align() <= WORD {
                mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

mod cli;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Output piped into a program that stops reading (`| head`) ends this one quietly, as it does
    // other command-line tools, instead of a panic at the next print. Not when agentsim talks to
    // a runtime under test over pipes: a runtime that exits must be an error agentsim reports,
    // not a signal that kills it.
    #[cfg(unix)]
    if !cli.command.talks_to_a_runtime() {
        // SAFETY: restoring the default disposition of SIGPIPE before any thread starts; no
        // handler is installed.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    #[cfg(all(feature = "mock-server", feature = "http-model"))]
    let serving = matches!(cli.command, Command::Serve(_));
    #[cfg(not(all(feature = "mock-server", feature = "http-model")))]
    let serving = false;
    if cli.verbose {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .without_time()
            .init();
    } else if serving {
        // A service says on stderr what it did on its own (callbacks delivered, retried or
        // given up, what a restart reconciled, an operation the store refused), with the time.
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    match cli.command {
        Command::Run(args) => cli::run::command(args),
        Command::Check(args) => cli::check::command(args),
        Command::Bench(args) => cli::bench::command(args),
        Command::Explore(args) => cli::explore::command(args),
        #[cfg(feature = "mock-server")]
        Command::MockLlm(args) => cli::mock_llm::command(args),
        #[cfg(all(feature = "mock-server", feature = "http-model"))]
        Command::Serve(args) => cli::serve::command(args),
        Command::Import(args) => cli::import::command(args),
        #[cfg(all(feature = "mock-server", feature = "http-model"))]
        Command::Record(args) => cli::record::command(args),
        Command::Schema => cli::schema(),
    }
}
