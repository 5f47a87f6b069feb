//! Client certificates as credentials: kube-apiserver's x509 authenticator and the
//! verification half of its front-proxy (`--requestheader-*`) authenticator.
//!
//! As kube-apiserver does (`tls.RequestClientCert`), the TLS handshake asks for a client
//! certificate when a client CA is configured but accepts any (it only checks that the
//! client holds the certificate's key); the certificate is then verified once per
//! connection, separately for each purpose, by [`PeerCert::verify`]:
//!
//! - against `--client-ca-file`, for a client-auth certificate: the user is its subject's
//!   common name, its groups the organizations, and its extra
//!   `authentication.kubernetes.io/credential-id` is `X509SHA256=<hex of the leaf's SHA-256>`
//!   (`CommonNameUserConversion`; an empty CN is no user, not an error);
//! - against `--requestheader-client-ca-file`: the front proxy's common name, which
//!   `authn::RequestHeader` checks against `--requestheader-allowed-names`.
//!
//! A certificate that does not verify is an error for that authenticator only: the request
//! may still authenticate with another credential (kube's `union` authenticator).
//!
//! The result travels with every request of the connection as `Arc<PeerCert>` in the
//! request's extensions; only the connection layer puts it there.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio_rustls::rustls::pki_types::{CertificateDer, UnixTime};
use tokio_rustls::rustls::server::danger::ClientCertVerifier;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::user::{User, UserInfo, AUTHENTICATED};

/// The extra key kube-apiserver (1.30+) gives every x509 user.
pub const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// Why a client certificate gives no identity (logged; the request may authenticate
/// otherwise, else it gets the 401).
#[derive(Debug, Clone, thiserror::Error)]
pub enum X509Error {
    #[error("verifying the client certificate: {0}")]
    Verify(#[from] tokio_rustls::rustls::Error),
    #[error("the client certificate cannot be parsed")]
    Parse,
}

/// What a connection's client certificate proves, per purpose. `None`: no CA is configured
/// for that purpose.
#[derive(Debug)]
pub struct PeerCert {
    /// The x509 user, or `Ok(None)` for a verified certificate without a common name.
    pub user: Option<Result<Option<Arc<User>>, X509Error>>,
    /// The front proxy's common name.
    pub proxy: Option<Result<String, X509Error>>,
}

impl PeerCert {
    /// Verifies `chain` (leaf first, as the client sent it) for each purpose whose CA is
    /// given. `None` for an empty chain.
    pub fn verify(
        chain: &[CertificateDer<'_>],
        client_ca: Option<&dyn ClientCertVerifier>,
        requestheader_ca: Option<&dyn ClientCertVerifier>,
    ) -> Option<Self> {
        let (leaf, intermediates) = chain.split_first()?;
        let now = UnixTime::now();
        let verified = |ca: &dyn ClientCertVerifier| -> Result<(), X509Error> {
            ca.verify_client_cert(leaf, intermediates, now)?;
            Ok(())
        };
        let user = client_ca.map(|ca| {
            verified(ca)?;
            Ok(user_of(leaf)?.map(|info| Arc::new(User::new(info))))
        });
        let proxy = requestheader_ca.map(|ca| {
            verified(ca)?;
            Ok(subject(leaf)?.common_name.unwrap_or_default())
        });
        Some(Self { user, proxy })
    }
}

struct Subject {
    common_name: Option<String>,
    organizations: Vec<String>,
}

/// The subject's last common name (Go's `pkix.Name` keeps the last one) and every
/// organization, in order.
fn subject(der: &CertificateDer<'_>) -> Result<Subject, X509Error> {
    let (_, cert) = X509Certificate::from_der(der.as_ref()).map_err(|_| X509Error::Parse)?;
    let subject = cert.subject();
    let text = |a: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        a.as_str().map(str::to_string).map_err(|_| X509Error::Parse)
    };
    let common_name = subject.iter_common_name().map(text).last().transpose()?;
    let organizations = subject
        .iter_organization()
        .map(text)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Subject {
        common_name,
        organizations,
    })
}

/// The x509 authenticator's user for a verified leaf certificate (`None`: no common name).
pub fn user_of(der: &CertificateDer<'_>) -> Result<Option<UserInfo>, X509Error> {
    let s = subject(der)?;
    let Some(name) = s.common_name.filter(|cn| !cn.is_empty()) else {
        return Ok(None);
    };
    let mut groups = s.organizations;
    if !groups.iter().any(|g| g == AUTHENTICATED) {
        groups.push(AUTHENTICATED.into());
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Ok(Some(UserInfo {
        name,
        uid: String::new(),
        groups,
        extra: BTreeMap::from([(CREDENTIAL_ID.to_string(), vec![format!("X509SHA256={hex}")])]),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair,
    };
    use tokio_rustls::rustls::server::WebPkiClientVerifier;
    use tokio_rustls::rustls::RootCertStore;

    fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
    }

    fn client(
        ca: &CertifiedIssuer<'static, KeyPair>,
        cn: Option<&str>,
        usage: ExtendedKeyUsagePurpose,
    ) -> CertificateDer<'static> {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        // rcgen's default subject has a common name of its own.
        p.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            p.distinguished_name.push(DnType::CommonName, cn);
        }
        p.distinguished_name
            .push(DnType::OrganizationName, "developers");
        p.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        p.signed_by(&key, ca).unwrap().der().clone()
    }

    fn verifier(ca: &CertifiedIssuer<'static, KeyPair>) -> Arc<dyn ClientCertVerifier> {
        let mut roots = RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(tokio_rustls::rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap()
    }

    #[test]
    fn a_certificate_is_verified_for_each_purpose_against_its_own_ca() {
        let users = ca("users");
        let proxies = ca("proxies");
        let (users_v, proxies_v) = (verifier(&users), verifier(&proxies));
        let carol = client(&users, Some("carol"), ExtendedKeyUsagePurpose::ClientAuth);

        let p = PeerCert::verify(
            std::slice::from_ref(&carol),
            Some(&*users_v),
            Some(&*proxies_v),
        )
        .unwrap();
        let user = p.user.unwrap().unwrap().unwrap();
        assert_eq!(user.info.name, "carol");
        assert_eq!(user.info.groups, ["developers", AUTHENTICATED]);
        let digest = ring::digest::digest(&ring::digest::SHA256, carol.as_ref());
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            user.info.extra[CREDENTIAL_ID],
            [format!("X509SHA256={hex}")]
        );
        assert!(p.proxy.unwrap().is_err(), "not signed by the proxies' CA");

        // The proxies' CA: a proxy, not a user.
        let proxy = client(&proxies, Some("front"), ExtendedKeyUsagePurpose::ClientAuth);
        let p = PeerCert::verify(
            std::slice::from_ref(&proxy),
            Some(&*users_v),
            Some(&*proxies_v),
        )
        .unwrap();
        assert!(p.user.unwrap().is_err());
        assert_eq!(p.proxy.unwrap().unwrap(), "front");

        // No CA configured for a purpose: no verdict for it; no certificate: nothing.
        let p = PeerCert::verify(std::slice::from_ref(&carol), None, None).unwrap();
        assert!(p.user.is_none() && p.proxy.is_none());
        assert!(PeerCert::verify(&[], Some(&*users_v), None).is_none());
    }

    #[test]
    fn a_server_only_certificate_or_an_empty_common_name_is_no_user() {
        let users = ca("users");
        let v = verifier(&users);
        let server = client(&users, Some("web"), ExtendedKeyUsagePurpose::ServerAuth);
        let p = PeerCert::verify(std::slice::from_ref(&server), Some(&*v), None).unwrap();
        assert!(p.user.unwrap().is_err(), "client-auth usage is required");
        let nameless = client(&users, None, ExtendedKeyUsagePurpose::ClientAuth);
        let p = PeerCert::verify(std::slice::from_ref(&nameless), Some(&*v), None).unwrap();
        assert!(
            matches!(p.user, Some(Ok(None))),
            "no CN: no user, and no error (kube's CommonNameUserConversion)"
        );
    }
}
