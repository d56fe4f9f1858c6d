//! Tests of the hooks on made-up memory.
