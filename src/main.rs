//! The `gatehouse` binary: the program is the library's `cli`.

gatehouse::binary!();
