//! A `redis-server` of a test's own (the workspace's one guard, in the test
//! support crate): a free loopback port, no persistence, killed when dropped.
//! Without `redis-server` on PATH a test skips with one loud line, unless
//! `SEAWALL_REQUIRE_REDIS=1` makes that a failure.

// Not every test file that includes the support starts a server.
#![allow(unused_imports)]

pub use seawall_test_support::RedisServer;
