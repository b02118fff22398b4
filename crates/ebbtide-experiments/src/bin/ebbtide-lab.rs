//! `ebbtide-lab`: runs the seeds' experiments. See `docs/experiments.md`.

use ebbtide_experiments::{child_main_if_requested, run_blkback, run_idle, run_uma, Opts, Scale};
use std::path::PathBuf;

const USAGE: &str = "\
usage: ebbtide-lab <blkback|uma|idle|all> [--quick | --smoke | --full] [--out DIR] [--runs N]

  blkback  seeds 000/001: page pools of many block devices vs a guest in a memory-limited
           cgroup with a swap file; before/after the squeeze, squeeze durations 1/10/100 ms,
           worst-case squeezing overhead (max_pgs 0 vs 1024, ministat + Welch t-test)
  uma      seed 002: request-server throughput with caches on/off; caches with/without
           back pressure under a tight memory limit (OOM kills, swap, throughput)
  idle     a burst, then idleness: RSS over time for ebbtide, glibc, jemalloc (default and
           background_thread:true), mimalloc, tcmalloc (peers via LD_PRELOAD)
  all      all three, into DIR/blkback, DIR/uma, DIR/idle

  --quick  a smaller version (about 1-3 minutes per experiment on 2 cores)
  --smoke  tiny sizes, seconds: checks the machinery
  --full   the measurements of docs/experiments.md (default)
  --out    output folder (default: lab-out/<experiment>)
  --runs   repetitions where an experiment repeats runs

       ebbtide-lab replot <blkback|uma> DIR   redraw DIR's SVGs from its series-*.json

Root is needed for cgroups and swap files; without it, the parts that need neither run.
Everything created (cgroups, swap file) is removed at the end, on Ctrl-C, on a crash, and
leftovers of an interrupted earlier run are removed at the start.";

fn main() {
    child_main_if_requested();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("replot") {
        // ebbtide-lab replot <blkback|uma> DIR: redraw the SVGs from series-*.json.
        let (Some(e), Some(d)) = (argv.get(1), argv.get(2)) else {
            eprintln!("usage: ebbtide-lab replot <blkback|uma> DIR");
            std::process::exit(2);
        };
        match ebbtide_experiments::replot(e, std::path::Path::new(d)) {
            Ok(files) => files.iter().for_each(|f| println!("wrote {}", f.display())),
            Err(err) => {
                eprintln!("replot: {err}");
                std::process::exit(1);
            }
        }
        return;
    }
    let mut args = argv.into_iter();
    let mut what = None;
    let mut scale = Scale::Full;
    let mut out: Option<PathBuf> = None;
    let mut runs = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => scale = Scale::Quick,
            "--smoke" => scale = Scale::Smoke,
            "--full" => scale = Scale::Full,
            "--out" => out = args.next().map(PathBuf::from),
            "--runs" => {
                runs = args.next().and_then(|v| v.parse().ok());
                if runs.is_none() {
                    eprintln!("--runs needs a number\n\n{USAGE}");
                    std::process::exit(2);
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            x if !x.starts_with('-') && what.is_none() => what = Some(x.to_string()),
            x => {
                eprintln!("unknown argument {x:?}\n\n{USAGE}");
                std::process::exit(2);
            }
        }
    }
    let Some(what) = what else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    let list: Vec<&str> = match what.as_str() {
        "all" => vec!["blkback", "uma", "idle"],
        "blkback" | "uma" | "idle" => vec![what.as_str()],
        x => {
            eprintln!("unknown experiment {x:?}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let mut failed = false;
    for e in &list {
        let dir = match (&out, list.len()) {
            (Some(o), 1) => o.clone(),
            (Some(o), _) => o.join(e),
            (None, _) => PathBuf::from("lab-out").join(e),
        };
        let opts = Opts {
            out: dir,
            scale,
            runs,
        };
        let r = match *e {
            "blkback" => run_blkback(&opts),
            "uma" => run_uma(&opts),
            _ => run_idle(&opts),
        };
        if let Err(err) = r {
            eprintln!("ebbtide-lab {e}: {err}");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
}
