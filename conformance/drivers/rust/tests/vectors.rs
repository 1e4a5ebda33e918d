//! `cargo test`: every vector of `$KPURGATORY_VECTORS` against the stdio binding (`$KPURGATORY_ADAPTER`).

fn main() {
    kpurgatory_vectors::main(env!("CARGO_TARGET_TMPDIR"), &[("stdio", kpurgatory_vectors::stdio::binding)]);
}
