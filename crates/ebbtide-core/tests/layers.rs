//! The layer order written in the design doc (`src/lib.rs`, the line starting "Layer order")
//! is the order the code has: every module of this crate names only modules below it (its
//! `crate::…` paths outside comments and test modules). A module that reaches up fails here,
//! with the offending line.

#[path = "support/layers.rs"]
mod layers;

#[test]
fn modules_only_reach_down() {
    layers::check(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
}
