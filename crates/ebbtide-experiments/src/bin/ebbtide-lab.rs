//! `ebbtide-lab`: runs the seeds' experiments (the same as `ebbtide lab`; `--help` lists
//! them).

fn main() {
    ebbtide_experiments::child_main_if_requested();
    std::process::exit(ebbtide_experiments::cli_main(
        std::env::args().skip(1).collect(),
    ));
}
