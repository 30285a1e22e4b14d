//! `gatehouse-conformance`: the same program as `gatehouse`, built with the `conformance` feature
//! (the conformance suite's fixtures), under its own name so a feature build never overwrites the
//! production binary.

gatehouse::binary!();
