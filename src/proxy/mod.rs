//! Forwarding to the upstream apiserver: streamed bodies, hop-by-hop headers, upgrades.
