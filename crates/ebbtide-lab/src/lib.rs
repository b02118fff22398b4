//! # ebbtide-lab: the machinery of ebbtide's experiments
//!
//! Everything an experiment needs to reproduce the seed documents' measurements on a real
//! Linux machine — except the allocator. The objects, in the order an experiment uses
//! them:
//!
//! | object                         | file           | what it is                                                          |
//! |--------------------------------|----------------|---------------------------------------------------------------------|
//! | [`Capabilities`]               | `privilege.rs` | may this process make cgroups and swap files? what is missing?      |
//! | [`LabLock`]                    | `lock.rs`      | one lab run at a time per machine (abstract socket, no file)        |
//! | cleanup registry               | `cleanup.rs`   | one place that removes everything on drop, panic, SIGINT/SIGTERM    |
//! | [`SwapFile`]                   | `swap.rs`      | a swap file, `swapoff` + deleted when dropped                       |
//! | [`Cgroup`]                     | `cgroup.rs`    | a memory-limited cgroup (v1 or v2); tasks killed, dir removed on drop |
//! | [`LabChild`]                   | `child.rs`     | a child process, SIGKILLed and reaped if dropped unwaited           |
//! | hog                            | `hog.rs`       | a child process that touches N MiB (and keeps re-touching)          |
//! | [`Sampler`] → [`Series`]       | `sampler.rs`   | background time series: RSS, cgroup usage, swap traffic, PSI, marks |
//! | [`VmStat`], [`SwapMeter`]      | `vmstat.rs`    | `pswpin`/`pswpout` deltas, per group where the kernel allows        |
//! | [`Psi`]                        | `psi.rs`       | memory pressure stall information                                   |
//! | [`stats`]                      | `stats.rs`     | min/max/median/mean/stddev, Welch and ministat t-tests, the verdict |
//! | [`Table`]                      | `table.rs`     | the seed's aligned text tables with `76,672` separators             |
//! | [`Summary`]                    | `summary.rs`   | `summary.json`: machine + one record of named figures per variant   |
//! | [`LinePlot`]                   | `plot.rs`      | SVG and PNG plots of memory and swap over time with event marks     |
//! | [`malloc_lib`]                 | `malloc_lib.rs` | where `libebbtide_malloc.so` is (found, or built in a cargo tree)  |
//! | [`Progress`]                   | `progress.rs`  | progress lines on stderr with elapsed time and ETA                  |
//!
//! ## Order of set-up and tear-down
//!
//! ```text
//! check() → LabLock::acquire → install_signal_handlers() → cleanup_leftovers()
//!   → SwapFile::create → Cgroup::create → Sampler::start → Cgroup::spawn(workload)
//!   → ... marks ... → child.wait → Sampler::stop → drop Cgroup → drop SwapFile
//!   → stats / Table / Summary::write_to / LinePlot::write_svg
//! ```
//!
//! Tear-down is reverse creation order: every guard registers its action in the cleanup
//! registry when it is created, and the action runs exactly once — from `Drop` (normal end
//! or unwinding panic) or from the signal thread's `run_all` (Ctrl-C, SIGTERM), newest
//! first. Names carry the creating pid (`ebbtide-lab-<pid>-…`,
//! `/var/tmp/ebbtide-lab-swap-<pid>-…`), so `cleanup_leftovers` can remove what a killed
//! run left without touching resources of live processes.
//!
//! ## Example
//!
//! ```no_run
//! use std::time::Duration;
//! use ebbtide_lab::*;
//!
//! # fn main() -> ebbtide_lab::Result<()> {
//! hog::main_if_requested(); // this binary is also the workload
//! let caps = privilege::check();
//! if !caps.full() { eprintln!("{}", caps.report()); return Ok(()); }
//! let _lock = LabLock::acquire(Duration::from_secs(600))?;
//! cleanup::install_signal_handlers()?;
//! leftovers::cleanup_leftovers()?;
//!
//! let swap = SwapFile::create(256 << 20)?;
//! let cg = Cgroup::create(&CgroupSpec::new("before").memory_max(64 << 20).swappiness(100))?;
//! let sampler = Sampler::start(SamplerConfig {
//!     interval: Duration::from_millis(50),
//!     pid: None,
//!     cgroup: Some(cg.reader()),
//! })?;
//! let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
//! hog::HogSpec { bytes: 128 << 20, retouch: true, duration: Duration::from_secs(5) }
//!     .apply_env(&mut cmd);
//! let mut child = cg.spawn(&mut cmd)?;
//! sampler.set_pid(child.pid());
//! sampler.mark("pressure", Some(1.0));
//! child.wait()?;
//! let series = sampler.stop()?;
//! let (pswpin, pswpout) = series.swap_totals();
//! drop(cg);
//! drop(swap);
//!
//! let mut summary = Summary::new("example");
//! summary.push(VariantRecord::new("before").with("pswpin", pswpin).with("pswpout", pswpout));
//! summary.note(format!("counters: {}", series.counter_source.as_str()));
//! summary.write_to(std::path::Path::new("out"))?;
//! plot::memory_plot("memory", &[("before", &series)]).write_svg("out/memory.svg".as_ref())?;
//! print!("{}", stats::ministat_table("max_pgs", &[("0", &[417.0, 420.0][..]), ("1024", &[414.0, 416.0][..])],
//!     stats::TTest::Welch, 95.0).unwrap());
//! # Ok(()) }
//! ```

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod cgroup;
pub mod child;
pub mod cleanup;
pub mod error;
pub mod hog;
pub mod leftovers;
pub mod lock;
pub mod malloc_lib;
pub mod plot;
pub mod privilege;
pub mod progress;
pub mod psi;
mod raster;
pub mod sampler;
pub mod stats;
pub mod summary;
pub mod swap;
pub mod table;
pub mod vmstat;

pub use cgroup::{Cgroup, CgroupReader, CgroupSpec, CgroupVersion, MemoryHierarchy};
pub use child::LabChild;
pub use cleanup::{install_signal_handlers, CleanupToken};
pub use error::{Error, Result};
pub use leftovers::cleanup_leftovers;
pub use lock::LabLock;
pub use plot::{LinePlot, PlotMark, PlotSeries};
pub use privilege::Capabilities;
pub use progress::Progress;
pub use psi::Psi;
pub use sampler::{Marker, Sample, Sampler, SamplerConfig, Series};
pub use stats::{Comparison, TTest};
pub use summary::{MachineInfo, Summary, VariantRecord};
pub use swap::SwapFile;
pub use table::{thousands, Table};
pub use vmstat::{CounterSource, SwapMeter, SwapTraffic, VmStat};
