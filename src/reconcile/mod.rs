//! STUB.
/// Reconciler (stub).
pub trait Reconciler {}
/// HttpLookup (stub).
#[derive(Debug)]
pub struct HttpLookup;
/// Recoverer (stub).
#[derive(Debug)]
pub struct Recoverer;
