//! `cargo test`: every vector of `$KPURGATORY_VECTORS` against the stdio binding (`$KPURGATORY_ADAPTER`).

fn main() {
    kpurgatory_driver::main(env!("CARGO_TARGET_TMPDIR"), &[("stdio", kpurgatory_driver::stdio::binding)]);
}
