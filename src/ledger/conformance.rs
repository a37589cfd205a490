//! Conformance suite (stub).
