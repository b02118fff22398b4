//! Tunables: one table, values in atomics, settable from the environment, the API and the
//! control socket.
//!
//! # The table
//!
//! [`table::TABLE`] (generated with the [`Tunable`] enum by one macro invocation in
//! `options/table.rs`) holds, per tunable: the name with its unit (`squeeze_ms`), the
//! [`Kind`] (syntax and unit), the default, the range `min..=max`, a summary and a longer
//! doc line, whether it may change at run time, and its ABI level. The environment name
//! derives from it (`EBBTIDE_` + upper-cased name), and so does `docs/ABI/testing/options`
//! (see [`abi`]).
//!
//! # Reading (hot-ish paths)
//!
//! [`get_u64`], [`get_bool`], [`get_duration`] and [`sources`] are one relaxed atomic load
//! from a static array: no lock, no allocation, no system call, safe from any thread and from
//! a signal handler. Every value is stored as a `u64` (bools as 0/1, word lists as bit masks).
//!
//! # Setting
//!
//! * Environment, once: [`init_from_env`] reads `EBBTIDE_CONF="name=value,name=value"` and
//!   every `EBBTIDE_<NAME>` variable (which wins over the same name in `EBBTIDE_CONF`).
//!   Idempotent: later calls return the errors of the first.
//! * API: [`set`], [`set_many`], [`apply_conf`] (the `EBBTIDE_CONF` syntax, also what the
//!   control socket will pass through); [`get`] and [`list`] to read as text.
//!
//! Every batch is all-or-nothing: each value is parsed and range-checked, the batch is checked
//! against the cross-tunable rules (PSI stalls ≤ `psi_window_us`; nonzero headroom levels
//! ordered critical ≤ moderate ≤ low), and only when nothing is wrong is anything stored.
//! All errors of a batch are reported, each saying what was expected.
//!
//! Start-up-only tunables (`runtime: false`) can be set until [`freeze_startup`] is called by
//! the allocator when it starts; afterwards setting one is an
//! [`OptionErrorKind::StartupOnly`] error.
//!
//! # Being told about changes
//!
//! * [`generation`] counts committed batches that changed at least one value. A poller (the
//!   reclaim thread) keeps the last generation it saw, or uses a [`Watcher`], and re-reads
//!   what it needs when it moved. [`last_changed`] tells which generation last changed one
//!   tunable.
//! * [`subscribe`] registers a plain `fn(Tunable, u64)` called once per changed tunable, on
//!   the setter's thread, after the batch is visible (e.g. `control_socket` turned on →
//!   start the socket). Callbacks run outside the registry's lock, so they may call
//!   [`get`]/[`set`]; concurrent setters may interleave their callbacks, so a callback should
//!   act on the current value ([`get_u64`]) rather than assume ordering.
//! * [`snapshot`] reads all values consistently (a sequence lock around the batch).

mod error;
pub mod parse;
pub mod table;

use std::ffi::OsString;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

pub use error::{OptionError, OptionErrorKind};
pub use parse::Assignment;
pub use table::{def, lookup, AbiLevel, Kind, Tunable, TunableDef, COUNT, SOURCE_WORDS, TABLE};

/// Environment variables with the `EBBTIDE_` prefix that are not per-tunable variables.
pub const ENV_RESERVED: &[&str] = &[
    "EBBTIDE_CONF",
    "EBBTIDE_RSEQ",
    "EBBTIDE_BLESS",
    "EBBTIDE_HOG",
    "EBBTIDE_LIB_DIR",
    // Where `ebbtide run` and the lab find libebbtide_malloc.so (not a tunable).
    "EBBTIDE_MALLOC_LIB",
];

/// Prefixes of `EBBTIDE_` variables that belong to the project's tools and tests (the lab, the C
/// API's tests, test helpers), not to the tunables: never an error.
pub const ENV_RESERVED_PREFIXES: &[&str] = &["EBBTIDE_LAB_", "EBBTIDE_CAPI_", "EBBTIDE_TEST_"];

/// A change callback: the tunable and its new stored value (see the module docs).
pub type ChangeCallback = fn(Tunable, u64);

/// A set of tunable values with its own change tracking. The library uses one global registry
/// (the free functions of this module); tests and tools may create their own.
pub struct Registry {
    values: [AtomicU64; COUNT],
    /// Generation at which each tunable last changed (0: never).
    changed_at: [AtomicU64; COUNT],
    /// Sequence counter: odd while a batch is being stored; `seq / 2` batches committed.
    seq: AtomicU64,
    started: AtomicBool,
    /// Serialises writers (readers never take it).
    write: Mutex<()>,
    callbacks: Mutex<Vec<ChangeCallback>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

/// A consistent copy of every value, indexed by `Tunable as usize`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Values {
    /// The values.
    pub values: [u64; COUNT],
    /// The generation they belong to.
    pub generation: u64,
}

impl Values {
    /// The value of `t`.
    pub fn get(&self, t: Tunable) -> u64 {
        self.values[t as usize]
    }
}

/// One row of [`list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The definition.
    pub def: &'static TunableDef,
    /// Current value, canonical text (as [`get`]).
    pub value: String,
    /// Default, canonical text.
    pub default: String,
    /// Accepted range with units.
    pub range: String,
}

/// `name = value (default D; range R; run time|start-up only) summary` — one line, for
/// listings on the control socket or in logs.
impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} = {} (default {}; range {}; {}) {}",
            self.def.name,
            self.value,
            self.default,
            self.range,
            if self.def.runtime {
                "run time"
            } else {
                "start-up only"
            },
            self.def.summary
        )
    }
}

impl Registry {
    /// A registry holding the defaults, not yet frozen.
    pub const fn new() -> Self {
        // Only an array-repeat initialiser: each element is a fresh atomic.
        #[allow(clippy::declare_interior_mutable_const)]
        const ZERO: AtomicU64 = AtomicU64::new(0);
        let mut values = [ZERO; COUNT];
        let mut i = 0;
        while i < COUNT {
            values[i] = AtomicU64::new(table::DEFAULTS[i]);
            i += 1;
        }
        Registry {
            values,
            changed_at: [ZERO; COUNT],
            seq: AtomicU64::new(0),
            started: AtomicBool::new(false),
            write: Mutex::new(()),
            callbacks: Mutex::new(Vec::new()),
        }
    }

    /// The value of `t` (one relaxed load).
    #[inline]
    pub fn get_u64(&self, t: Tunable) -> u64 {
        self.values[t as usize].load(Ordering::Relaxed)
    }

    /// The value of `name` as canonical text.
    pub fn get(&self, name: &str) -> Result<String, OptionError> {
        let def = find(name)?;
        Ok(parse::canonical(def, self.get_u64(def.tunable)))
    }

    /// All tunables in table order.
    pub fn list(&self) -> Vec<Setting> {
        TABLE
            .iter()
            .map(|def| Setting {
                def,
                value: parse::canonical(def, self.get_u64(def.tunable)),
                default: parse::canonical(def, def.default),
                range: parse::range_text(def),
            })
            .collect()
    }

    /// Committed batches that changed something.
    #[inline]
    pub fn generation(&self) -> u64 {
        // Acquire pairs with the Release store that ends a batch in `commit`: a reader that
        // sees generation g sees every value stored by batches up to g.
        self.seq.load(Ordering::Acquire) / 2
    }

    /// Generation of the last batch that changed `t` (0: still the default).
    pub fn last_changed(&self, t: Tunable) -> u64 {
        self.changed_at[t as usize].load(Ordering::Relaxed)
    }

    /// Every value as of one generation.
    pub fn snapshot(&self) -> Values {
        loop {
            // Acquire pairs with the Release store ending a batch in `commit`.
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let values = std::array::from_fn(|i| self.values[i].load(Ordering::Relaxed));
            // Acquire fence pairs with the Release fence after the odd store in `commit`: if
            // any load above saw a store of a newer batch, the reload below sees its odd seq.
            fence(Ordering::Acquire);
            let s2 = self.seq.load(Ordering::Relaxed);
            if s1 == s2 {
                return Values {
                    values,
                    generation: s1 / 2,
                };
            }
        }
    }

    /// Forbid setting start-up-only tunables from now on.
    pub fn freeze_startup(&self) {
        // Release: pairs with the Acquire in `is_frozen`: a thread that sees the registry frozen
        // sees the start-up values committed before (the batch commit itself is under a lock).
        self.started.store(true, Ordering::Release);
    }

    /// Whether [`Registry::freeze_startup`] was called.
    pub fn is_frozen(&self) -> bool {
        // Acquire: pairs with the Release in `freeze_startup`.
        self.started.load(Ordering::Acquire)
    }

    /// Register a change callback (see the module docs).
    pub fn subscribe(&self, f: ChangeCallback) {
        lock_gated(&self.callbacks).push(f);
    }

    /// Set one tunable from text.
    pub fn set(&self, name: &str, value: &str) -> Result<(), OptionError> {
        let a = parse::parse_assignment(name, value)?;
        self.commit(vec![a]).map_err(|mut e| e.remove(0))
    }

    /// Set several tunables, all or none.
    pub fn set_many(&self, pairs: &[(&str, &str)]) -> Result<(), Vec<OptionError>> {
        let mut batch: Vec<Assignment> = Vec::new();
        let mut errors = Vec::new();
        for &(name, value) in pairs {
            match parse::parse_assignment(name, value) {
                Ok(a) if batch.iter().any(|b| std::ptr::eq(b.def, a.def)) => {
                    errors.push(OptionErrorKind::Duplicate { name: a.def.name }.into())
                }
                Ok(a) => batch.push(a),
                Err(kind) => errors.push(kind.into()),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        self.commit(batch)
    }

    /// Apply a `name=value,name=value` string (the `EBBTIDE_CONF` syntax), all or none.
    pub fn apply_conf(&self, conf: &str) -> Result<(), Vec<OptionError>> {
        self.apply_conf_from(conf, "conf")
    }

    /// As [`Registry::apply_conf`], naming where the text came from in errors
    /// (`"control socket"` gives `"control socket entry 2 'x=y': ..."`).
    pub fn apply_conf_from(&self, conf: &str, origin: &str) -> Result<(), Vec<OptionError>> {
        let batch = parse::parse_conf(conf, origin)?;
        self.commit(batch)
    }

    /// Apply environment variables (`EBBTIDE_CONF` and `EBBTIDE_<NAME>`), all or none.
    /// Variables without the `EBBTIDE_` prefix are ignored; unknown `EBBTIDE_*` variables
    /// (other than [`ENV_RESERVED`]) are errors. A per-name variable wins over the same name
    /// in `EBBTIDE_CONF`. Start-up-only tunables are accepted while not frozen.
    pub fn apply_env<I>(&self, vars: I) -> Result<(), Vec<OptionError>>
    where
        I: IntoIterator<Item = (OsString, OsString)>,
    {
        let batch = parse_env(vars)?;
        self.commit(batch)
    }

    /// Validate and store a batch: all or nothing.
    fn commit(&self, batch: Vec<Assignment>) -> Result<(), Vec<OptionError>> {
        let guard = lock_gated(&self.write);
        let mut errors = Vec::new();
        if self.is_frozen() {
            for a in &batch {
                if !a.def.runtime {
                    errors.push(OptionError::from(OptionErrorKind::StartupOnly {
                        name: a.def.name,
                        env: a.def.env_name(),
                    }));
                }
            }
        }
        // Cross-tunable rules, on the values as they would be after the batch.
        let mut staged: [u64; COUNT] =
            std::array::from_fn(|i| self.values[i].load(Ordering::Relaxed));
        for a in &batch {
            staged[a.def.tunable as usize] = a.value;
        }
        errors.extend(
            check_rules(&staged)
                .into_iter()
                .map(|message| OptionError::from(OptionErrorKind::Conflict { message })),
        );
        if !errors.is_empty() {
            return Err(errors);
        }
        let changed: Vec<(Tunable, u64)> = batch
            .iter()
            .filter(|a| self.get_u64(a.def.tunable) != a.value)
            .map(|a| (a.def.tunable, a.value))
            .collect();
        if changed.is_empty() {
            return Ok(());
        }
        let seq = self.seq.load(Ordering::Relaxed);
        let generation = seq / 2 + 1;
        self.seq.store(seq + 1, Ordering::Relaxed);
        // Release fence pairs with the Acquire fence in `snapshot`: a reader that observes any
        // value stored below also observes the odd sequence number stored above.
        fence(Ordering::Release);
        for &(t, v) in &changed {
            self.values[t as usize].store(v, Ordering::Relaxed);
            self.changed_at[t as usize].store(generation, Ordering::Relaxed);
        }
        // Release pairs with the Acquire loads in `generation` and `snapshot`.
        self.seq.store(seq + 2, Ordering::Release);
        drop(guard);
        let callbacks: Vec<ChangeCallback> = lock_gated(&self.callbacks).clone();
        for (t, v) in changed {
            for cb in &callbacks {
                cb(t, v);
            }
        }
        Ok(())
    }
}

// A panicking callback or writer leaves consistent data (stores are atomic, the batch was
// validated first), so poisoning carries no information here: the workspace's one helper.
use ebbtide_core::lock_gated;

fn find(name: &str) -> Result<&'static TunableDef, OptionError> {
    lookup(name.trim()).ok_or_else(|| {
        OptionErrorKind::UnknownName {
            name: name.to_string(),
            suggestions: parse::name_suggestions(name.trim()),
        }
        .into()
    })
}

/// The cross-tunable rules; each broken rule as a message.
pub fn check_rules(v: &[u64; COUNT]) -> Vec<String> {
    let mut out = Vec::new();
    let window = v[Tunable::PsiWindowUs as usize];
    for t in [
        Tunable::PsiLowStallUs,
        Tunable::PsiModerateStallUs,
        Tunable::PsiCriticalStallUs,
    ] {
        let stall = v[t as usize];
        if stall > window {
            out.push(format!(
                "{} ({stall}us) must not exceed psi_window_us ({window}us)",
                def(t).name
            ));
        }
    }
    let ordered = [
        Tunable::HeadroomCriticalPct,
        Tunable::HeadroomModeratePct,
        Tunable::HeadroomLowPct,
    ];
    for (i, &lo) in ordered.iter().enumerate() {
        for &hi in &ordered[i + 1..] {
            let (a, b) = (v[lo as usize], v[hi as usize]);
            if a != 0 && b != 0 && a > b {
                out.push(format!(
                    "{} ({a}%) must not exceed {} ({b}%) (levels critical <= moderate <= low; 0 disables a level)",
                    def(lo).name,
                    def(hi).name
                ));
            }
        }
    }
    out
}

/// The environment's `EBBTIDE_*` variables, and only those. `std::env::vars_os` would copy the
/// whole environment first (two allocations per variable, and a vector grown through five size
/// classes): in the malloc that is a dozen size classes touched at start-up, each a few pages
/// of every process's RSS, for variables that are then dropped. This walks `environ` as
/// `getenv(3)` does (the same caveat: not against a concurrent `setenv` from C).
fn ebbtide_vars() -> Vec<(OsString, OsString)> {
    use std::os::unix::ffi::OsStrExt;
    extern "C" {
        static environ: *const *const libc::c_char;
    }
    let mut out = Vec::new();
    // SAFETY: `environ` is libc's NULL-terminated array of NUL-terminated strings, read (not
    // changed) as getenv(3) reads it; each entry stays valid while no one calls setenv/putenv,
    // which the caller (start-up, or the first zone) does not do meanwhile.
    unsafe {
        let mut e = environ;
        while !e.is_null() && !(*e).is_null() {
            let entry = std::ffi::CStr::from_ptr(*e).to_bytes();
            e = e.add(1);
            if !entry.starts_with(b"EBBTIDE_") {
                continue;
            }
            // As std's: the name ends at the first '=' after its first byte.
            let Some(eq) = entry[1..].iter().position(|&b| b == b'=').map(|i| i + 1) else {
                continue;
            };
            out.push((
                std::ffi::OsStr::from_bytes(&entry[..eq]).to_os_string(),
                std::ffi::OsStr::from_bytes(&entry[eq + 1..]).to_os_string(),
            ));
        }
    }
    out
}

/// Parse environment variables into one batch (see [`Registry::apply_env`]).
pub fn parse_env<I>(vars: I) -> Result<Vec<Assignment>, Vec<OptionError>>
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    let mut from_conf: Vec<Assignment> = Vec::new();
    let mut from_vars: Vec<Assignment> = Vec::new();
    let mut errors = Vec::new();
    let mut pairs: Vec<(OsString, OsString)> = vars
        .into_iter()
        .filter(|(k, _)| k.as_encoded_bytes().starts_with(b"EBBTIDE_"))
        .collect();
    // Deterministic error order whatever the environment's order.
    pairs.sort();
    for (k, v) in pairs {
        let (Some(key), Some(value)) = (k.to_str(), v.to_str()) else {
            errors.push(
                OptionErrorKind::NotUnicode {
                    var: k.to_string_lossy().into_owned(),
                }
                .into(),
            );
            continue;
        };
        if key == "EBBTIDE_CONF" {
            match parse::parse_conf(value, "EBBTIDE_CONF") {
                Ok(a) => from_conf = a,
                Err(e) => errors.extend(e),
            }
            continue;
        }
        if ENV_RESERVED.contains(&key) || ENV_RESERVED_PREFIXES.iter().any(|p| key.starts_with(p)) {
            continue;
        }
        let def = TABLE.iter().find(|d| d.env_name() == key);
        let Some(def) = def else {
            let names: Vec<String> = TABLE.iter().map(|d| d.env_name()).collect();
            let suggestions = parse::suggestions(key, names.iter().map(String::as_str))
                .into_iter()
                .map(str::to_string)
                .collect();
            errors.push(
                OptionErrorKind::UnknownEnv {
                    var: key.to_string(),
                    suggestions,
                }
                .into(),
            );
            continue;
        };
        match parse::parse_value(def, value) {
            Ok(value) => from_vars.push(Assignment { def, value }),
            Err(kind) => errors.push(OptionError::new(kind, key)),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    from_conf.retain(|a| !from_vars.iter().any(|b| std::ptr::eq(a.def, b.def)));
    from_conf.extend(from_vars);
    Ok(from_conf)
}

static GLOBAL: Registry = Registry::new();
static ENV_ERRORS: OnceLock<Vec<OptionError>> = OnceLock::new();

/// The process-wide registry the free functions use.
pub fn global() -> &'static Registry {
    &GLOBAL
}

/// The value of `t`: one relaxed atomic load; never locks or allocates.
#[inline]
pub fn get_u64(t: Tunable) -> u64 {
    GLOBAL.get_u64(t)
}

/// A [`Kind::Bool`] tunable.
#[inline]
pub fn get_bool(t: Tunable) -> bool {
    debug_assert_eq!(def(t).kind, Kind::Bool);
    GLOBAL.get_u64(t) != 0
}

/// A [`Kind::Millis`] or [`Kind::Micros`] tunable as a `Duration`.
#[inline]
pub fn get_duration(t: Tunable) -> Duration {
    let v = GLOBAL.get_u64(t);
    match def(t).kind {
        Kind::Micros => Duration::from_micros(v),
        _ => {
            debug_assert_eq!(def(t).kind, Kind::Millis);
            Duration::from_millis(v)
        }
    }
}

/// The selected pressure sources.
#[inline]
pub fn sources() -> SourceSet {
    SourceSet(GLOBAL.get_u64(Tunable::Sources))
}

/// A set of pressure sources (bit *i* = `SOURCE_WORDS[i]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceSet(pub u64);

impl SourceSet {
    /// Whether the source named `name` (one of [`SOURCE_WORDS`]) is selected.
    pub fn contains(self, name: &str) -> bool {
        SOURCE_WORDS
            .iter()
            .position(|w| *w == name)
            .is_some_and(|i| self.0 & (1 << i) != 0)
    }

    /// Selected source names in table order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        SOURCE_WORDS
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, w)| *w)
    }
}

/// The value of `name` as canonical text (what `set` accepts back).
pub fn get(name: &str) -> Result<String, OptionError> {
    GLOBAL.get(name)
}

/// Set one tunable from text; nothing changes on error.
pub fn set(name: &str, value: &str) -> Result<(), OptionError> {
    GLOBAL.set(name, value)
}

/// Set several tunables, all or none.
pub fn set_many(pairs: &[(&str, &str)]) -> Result<(), Vec<OptionError>> {
    GLOBAL.set_many(pairs)
}

/// Apply a `name=value,...` string (`EBBTIDE_CONF` syntax), all or none.
pub fn apply_conf(conf: &str) -> Result<(), Vec<OptionError>> {
    GLOBAL.apply_conf(conf)
}

/// As [`apply_conf`], naming the origin in errors (e.g. `"control socket"`).
pub fn apply_conf_from(conf: &str, origin: &str) -> Result<(), Vec<OptionError>> {
    GLOBAL.apply_conf_from(conf, origin)
}

/// All tunables with current value, default and range.
pub fn list() -> Vec<Setting> {
    GLOBAL.list()
}

/// Committed batches that changed something (see the module docs).
#[inline]
pub fn generation() -> u64 {
    GLOBAL.generation()
}

/// Generation of the last batch that changed `t`.
pub fn last_changed(t: Tunable) -> u64 {
    GLOBAL.last_changed(t)
}

/// Every value as of one generation.
pub fn snapshot() -> Values {
    GLOBAL.snapshot()
}

/// Register a change callback (see the module docs).
pub fn subscribe(f: ChangeCallback) {
    GLOBAL.subscribe(f)
}

/// Read the environment once and apply it (all or nothing); return the errors. Later calls
/// return the same errors without reading the environment again.
pub fn init_from_env() -> &'static [OptionError] {
    ENV_ERRORS.get_or_init(|| match GLOBAL.apply_env(ebbtide_vars()) {
        Ok(()) => Vec::new(),
        Err(e) => e,
    })
}

/// Called by the allocator when it starts: applies the environment if not done yet, then
/// forbids changing start-up-only tunables. Returns the environment errors.
pub fn freeze_startup() -> &'static [OptionError] {
    let errors = init_from_env();
    GLOBAL.freeze_startup();
    errors
}

/// [`freeze_startup`], reporting the environment's errors on stderr the first time (whichever
/// start path comes first: the malloc's load, a zone's creation, the reclaim thread's start).
pub fn freeze_startup_reported() {
    static REPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let errors = freeze_startup();
    if !REPORTED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        for e in errors {
            ebbtide_core::error::report(format_args!(
                "ebbtide: ignoring the environment's settings: {e}"
            ));
        }
    }
}

/// Remembers a generation and tells when the global registry moved past it.
#[derive(Debug, Default)]
pub struct Watcher {
    seen: u64,
}

impl Watcher {
    /// A watcher that has seen the current generation.
    pub fn new() -> Self {
        Watcher { seen: generation() }
    }

    /// `true` once after each change (one Acquire load).
    pub fn changed(&mut self) -> bool {
        let g = generation();
        let moved = g != self.seen;
        self.seen = g;
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    /// The walk of `environ` finds exactly what `std::env::vars_os` finds under the prefix,
    /// values with '=' and empty values included.
    #[test]
    fn the_environment_walk_matches_std() {
        std::env::set_var("EBBTIDE_TEST_WALK_A", "x=y,z");
        std::env::set_var("EBBTIDE_TEST_WALK_B", "");
        let mut ours = ebbtide_vars();
        let mut std_: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| k.as_encoded_bytes().starts_with(b"EBBTIDE_"))
            .collect();
        ours.sort();
        std_.sort();
        assert_eq!(ours, std_);
        assert!(ours.contains(&(
            OsString::from("EBBTIDE_TEST_WALK_A"),
            OsString::from("x=y,z")
        )));
        assert!(ours.contains(&(OsString::from("EBBTIDE_TEST_WALK_B"), OsString::new())));
        assert!(ours
            .iter()
            .all(|(k, _)| k.as_encoded_bytes().starts_with(b"EBBTIDE_")));
        std::env::remove_var("EBBTIDE_TEST_WALK_A");
        std::env::remove_var("EBBTIDE_TEST_WALK_B");
    }

    #[test]
    fn table_is_consistent() {
        for (i, d) in TABLE.iter().enumerate() {
            assert_eq!(d.tunable as usize, i);
            assert!(d.min <= d.default && d.default <= d.max, "{}", d.name);
            assert!(d
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit()));
            let unit_in_name = match d.kind {
                Kind::Millis => d.name.ends_with("_ms"),
                Kind::Micros => d.name.ends_with("_us"),
                Kind::Bytes => d.name.ends_with("_bytes"),
                Kind::Percent => d.name.ends_with("_pct"),
                Kind::Count => d.name.ends_with("_pages") || d.name.ends_with("_items"),
                Kind::Bool | Kind::Words(_) => true,
            };
            assert!(unit_in_name, "{} does not carry its unit", d.name);
            // The canonical text of the default parses back to the default.
            let text = parse::canonical(d, d.default);
            assert_eq!(parse::parse_value(d, &text), Ok(d.default), "{}", d.name);
        }
        assert!(check_rules(&table::DEFAULTS).is_empty());
    }

    #[test]
    fn set_get_and_generation() {
        let r = Registry::new();
        assert_eq!(r.generation(), 0);
        r.set("squeeze_ms", "20ms").unwrap();
        assert_eq!(r.get("squeeze_ms").unwrap(), "20");
        assert_eq!(r.get_u64(Tunable::SqueezeMs), 20);
        assert_eq!(r.generation(), 1);
        assert_eq!(r.last_changed(Tunable::SqueezeMs), 1);
        assert_eq!(r.last_changed(Tunable::TrimIntervalMs), 0);
        // Same value: no new generation.
        r.set("squeeze_ms", "20").unwrap();
        assert_eq!(r.generation(), 1);
        assert_eq!(r.snapshot().get(Tunable::SqueezeMs), 20);
        assert_eq!(r.snapshot().generation, 1);
    }

    #[test]
    fn unknown_name_suggests() {
        let r = Registry::new();
        let e = r.set("squeez_ms", "5").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown tunable 'squeez_ms'; did you mean 'squeeze_ms'?"
        );
        assert!(r.get("nope").is_err());
    }

    #[test]
    fn startup_only_after_freeze() {
        let r = Registry::new();
        r.set("checked", "true").unwrap();
        r.freeze_startup();
        let e = r.set("checked", "false").unwrap_err();
        assert!(matches!(e.kind, OptionErrorKind::StartupOnly { .. }));
        assert!(e.to_string().contains("EBBTIDE_CHECKED"), "{e}");
        assert_eq!(r.get_u64(Tunable::Checked), 1);
        r.set("control_socket", "on").unwrap();
    }

    #[test]
    fn cross_rules_are_checked_on_the_batch() {
        let r = Registry::new();
        let e = r.set("headroom_low_pct", "8").unwrap_err();
        assert!(matches!(e.kind, OptionErrorKind::Conflict { .. }), "{e}");
        assert_eq!(r.get_u64(Tunable::HeadroomLowPct), 20);
        r.set_many(&[
            ("headroom_low_pct", "8"),
            ("headroom_moderate_pct", "6"),
            ("headroom_critical_pct", "4"),
        ])
        .unwrap();
        assert_eq!(r.generation(), 1);
        let e = r.set("psi_low_stall_us", "3s").unwrap_err();
        assert!(e.to_string().contains("psi_window_us"), "{e}");
    }

    #[test]
    fn conf_is_all_or_nothing() {
        let r = Registry::new();
        let errs = r
            .apply_conf("squeeze_ms=5,trim_interval_ms=50,max_buffer_pages=7")
            .unwrap_err();
        assert_eq!(errs.len(), 1);
        assert_eq!(r.generation(), 0);
        assert_eq!(r.get_u64(Tunable::SqueezeMs), 10);
        assert_eq!(r.get_u64(Tunable::MaxBufferPages), 1024);
        let errs = r
            .apply_conf_from("max_buffer_pages=x", "control socket")
            .unwrap_err();
        assert_eq!(
            errs[0].to_string(),
            "control socket entry 1 'max_buffer_pages=x': max_buffer_pages: cannot parse 'x': \
             expected a whole number"
        );
        r.apply_conf("squeeze_ms=5,max_buffer_pages=7").unwrap();
        assert_eq!(r.get_u64(Tunable::MaxBufferPages), 7);
    }

    #[test]
    fn env_vars() {
        let r = Registry::new();
        let errs = r
            .apply_env(env(&[
                ("EBBTIDE_CONF", "squeeze_ms=5,sources=psi,cgroup1"),
                ("EBBTIDE_SQUEEZ_MS", "7"),
                ("EBBTIDE_CHECKED", "maybe"),
                ("HOME", "/root"),
            ]))
            .unwrap_err();
        assert_eq!(errs.len(), 2, "{errs:?}");
        // Sorted by variable name.
        assert!(errs[0]
            .to_string()
            .starts_with("EBBTIDE_CHECKED: checked: cannot parse"));
        assert!(errs[1]
            .to_string()
            .contains("did you mean 'EBBTIDE_SQUEEZE_MS'"));
        assert_eq!(r.generation(), 0);

        r.apply_env(env(&[
            ("EBBTIDE_CONF", "squeeze_ms=5,sources=psi,cgroup1,checked=1"),
            ("EBBTIDE_SQUEEZE_MS", "7"),
        ]))
        .unwrap();
        assert_eq!(r.get_u64(Tunable::SqueezeMs), 7, "per-name variable wins");
        assert_eq!(r.get("sources").unwrap(), "psi,cgroup1");
        assert_eq!(r.get_u64(Tunable::Checked), 1);
        assert_eq!(r.generation(), 1, "one batch");
    }

    static CALLS: AtomicUsize = AtomicUsize::new(0);
    fn on_change(t: Tunable, v: u64) {
        if t == Tunable::ControlSocket && v == 1 {
            CALLS.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn callbacks_see_changes() {
        let r = Registry::new();
        r.subscribe(on_change);
        r.set("control_socket", "true").unwrap();
        r.set("control_socket", "true").unwrap();
        assert_eq!(CALLS.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn list_covers_the_table() {
        let r = Registry::new();
        let l = r.list();
        assert_eq!(l.len(), COUNT);
        assert_eq!(l[0].def.name, "squeeze_ms");
        assert_eq!(l[0].range, "0ms..=60000ms");
        assert_eq!(
            l[0].to_string(),
            "squeeze_ms = 10 (default 10; range 0ms..=60000ms; run time) how long page pools \
             and depots stay squeezed to zero after Moderate pressure"
        );
        assert_eq!(def(Tunable::SqueezeMs).env_name(), "EBBTIDE_SQUEEZE_MS");
    }

    #[test]
    fn snapshot_is_consistent_under_writers() {
        let r = Registry::new();
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..2000u64 {
                    let v = (i % 1000).to_string();
                    r.set_many(&[
                        ("drain_cpu_min_interval_ms", &v),
                        ("trim_min_interval_ms", &v),
                    ])
                    .unwrap();
                }
            });
            for _ in 0..2000 {
                let s = r.snapshot();
                assert_eq!(
                    s.get(Tunable::DrainCpuMinIntervalMs),
                    s.get(Tunable::TrimMinIntervalMs)
                );
            }
        });
    }
}
