//! A complete lab run in the seed's shape, with a plain memory hog standing in for the
//! allocator: two variants ("retouch": keeps rewriting 96 MiB in a 64 MiB group;
//! "touch-once": writes it once and idles), three runs each, then the seed's
//! `pswpin pswpout` table, a ministat table of the run times, `summary.json` and SVG plots.
//!
//! ```text
//! cargo run -p ebbtide-lab --example lab_demo -- [OUT_DIR]   # default ./lab-out, needs root
//! ```

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ebbtide_lab::hog::{self, HogSpec};
use ebbtide_lab::*;

const MIB: u64 = 1 << 20;
const RUNS: usize = 3;

fn main() -> Result<()> {
    hog::main_if_requested(); // this binary is also the workload
    let out = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "lab-out".into()));
    let caps = privilege::check();
    eprint!("{}", caps.report());
    if !caps.full() {
        eprintln!("lab_demo: cannot run the experiment here (see above)");
        std::process::exit(1);
    }
    let _lock = LabLock::acquire(Duration::from_secs(600))?;
    install_signal_handlers()?;
    cleanup_leftovers()?;

    let swap = SwapFile::create(256 * MIB)?;
    let variants = [("retouch", true), ("touch-once", false)];
    let mut progress = Progress::new("lab_demo", variants.len() * RUNS);
    let mut summary = Summary::new("lab_demo");
    let mut table = Table::new(&["", "pswpin", "pswpout"]);
    let mut times: Vec<(String, Vec<f64>)> = Vec::new();
    let mut first_series: Vec<(String, Series)> = Vec::new();

    for (name, retouch) in variants {
        let (mut ins, mut outs, mut secs) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..RUNS {
            progress.begin(&format!("{name}, run {}", run + 1));
            let cg = Cgroup::create(&CgroupSpec::new(name).memory_max(64 * MIB).swappiness(100))?;
            let sampler = Sampler::start(SamplerConfig {
                interval: Duration::from_millis(50),
                pid: None,
                cgroup: Some(cg.reader()),
            })?;
            let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
            cmd.stdout(Stdio::null());
            HogSpec {
                bytes: 96 * MIB,
                retouch,
                duration: Duration::from_secs(3),
            }
            .apply_env(&mut cmd);
            let t0 = Instant::now();
            let mut child = cg.spawn(&mut cmd)?;
            sampler.set_pid(child.pid());
            sampler.mark("start", None);
            let status = child.wait()?;
            secs.push(t0.elapsed().as_secs_f64());
            let series = sampler.stop()?;
            if !status.success() {
                return Err(Error::Other(format!("hog failed: {status}")));
            }
            let (i, o) = series.swap_totals();
            ins.push(i as f64);
            outs.push(o as f64);
            progress.note(&format!("pswpin {} pswpout {}", thousands(i), thousands(o)));
            if run == 0 {
                first_series.push((name.to_string(), series));
            }
        }
        let med_in = stats::Summary::of(&ins).expect("runs").median;
        let med_out = stats::Summary::of(&outs).expect("runs").median;
        table.row(&[name, &thousands(med_in as u64), &thousands(med_out as u64)]);
        summary.push(
            VariantRecord::new(name)
                .with("pswpin", med_in)
                .with("pswpout", med_out)
                .with("runs_pswpout", &outs)
                .with("runs_seconds", &secs),
        );
        times.push((name.to_string(), secs));
    }
    drop(swap);
    progress.finish();

    println!("medians of {RUNS} runs:\n{table}");
    let sets: Vec<(&str, &[f64])> = times.iter().map(|(n, v)| (n.as_str(), &v[..])).collect();
    let ministat =
        stats::ministat_table("variant", &sets, stats::TTest::Welch, 95.0).expect("data");
    println!("run time (s):\n{ministat}");

    let src = first_series[0].1.counter_source.as_str();
    summary.note(format!("swap counters: {src}"));
    summary.note(ministat);
    let json = summary.write_to(&out)?;
    let refs: Vec<(&str, &Series)> = first_series.iter().map(|(n, s)| (n.as_str(), s)).collect();
    plot::memory_plot("lab_demo: cgroup memory, first run", &refs)
        .write_svg(&out.join("memory.svg"))?;
    plot::swap_plot("lab_demo: swap traffic, first run", &refs).write_svg(&out.join("swap.svg"))?;
    println!("wrote {}, memory.svg, swap.svg", json.display());
    Ok(())
}
