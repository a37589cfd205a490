//! `recoverable-write`: the operators' command line (feature `cli`). All the logic lives in
//! [`recoverable_write::cli`]; run `recoverable-write --help`.

fn main() -> std::process::ExitCode {
    recoverable_write::cli::main()
}
