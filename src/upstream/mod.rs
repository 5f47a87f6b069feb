//! The upstream apiserver client: kube config inference, TLS, auth, pooling.
