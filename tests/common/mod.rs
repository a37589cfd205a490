//! The drill harness lives in the library (`recoverable_write::testing::drill`, feature
//! `test-util`) so the drill example uses the same one.
#![allow(unused_imports)]

pub use recoverable_write::testing::drill::*;
