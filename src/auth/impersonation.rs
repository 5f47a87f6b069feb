//! A client's own `Impersonate-*` headers (`kubectl --as`), handled as kube-apiserver's
//! impersonation filter handles them (k8s.io/apiserver `filters/impersonation.go`): the
//! requesting user must be allowed the `impersonate` verb on every part of the requested
//! identity (the user or service account, each group, the uid, each extra value); then the
//! request goes on as that identity, which is what watchgate authorizes and forwards.
//! Without this, forwarding would replace the client's impersonation with its own
//! identity and silently drop `--as`.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::{HeaderMap, Response};

use super::answers;
use super::attributes::Attributes;
use super::authz::Authorizer;
use super::review::Decision;
use super::user::{
    path_unescape, User, UserInfo, ANONYMOUS, AUTHENTICATED, IMPERSONATE_EXTRA_PREFIX,
    IMPERSONATE_GROUP, IMPERSONATE_UID, IMPERSONATE_USER, UNAUTHENTICATED,
};
use crate::body::Body;
use crate::status::Status;

const SA_PREFIX: &str = "system:serviceaccount:";

/// The identity the request's `Impersonate-*` headers ask for, if any (the headers are
/// removed), or the answer that refuses it.
pub async fn impersonate(
    authz: &Authorizer,
    requestor: &Arc<User>,
    headers: &mut HeaderMap,
    error_form: Option<crate::negotiate::Negotiated>,
) -> Result<Option<Arc<User>>, Response<Body>> {
    let values = |h: &HeaderMap, name| -> Vec<String> {
        h.get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let user = values(headers, IMPERSONATE_USER).into_iter().next();
    let groups = values(headers, IMPERSONATE_GROUP);
    let uid = values(headers, IMPERSONATE_UID).into_iter().next();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers.iter() {
        if let Some(key) = name.as_str().strip_prefix(IMPERSONATE_EXTRA_PREFIX) {
            if let Ok(v) = value.to_str() {
                extra
                    .entry(path_unescape(key))
                    .or_default()
                    .push(v.to_string());
            }
        }
    }
    let Some(user) = user else {
        if groups.is_empty() && uid.is_none() && extra.is_empty() {
            return Ok(None);
        }
        return Err(
            Status::internal("requested impersonation without impersonating a user")
                .into_response(),
        );
    };
    // Each part of the identity needs its own permission.
    let mut checks = Vec::new();
    // impersonation.go's object references: users, groups and service accounts have no
    // apiVersion (so group "" and no version), uids and userextras are
    // authentication.k8s.io/v1.
    let ask = |group: &str, resource: &str, sub: &str, ns: &str, name: &str| Attributes {
        verb: "impersonate".into(),
        group: group.into(),
        version: if group.is_empty() { "" } else { "v1" }.into(),
        resource: resource.into(),
        subresource: sub.into(),
        namespace: ns.into(),
        name: name.into(),
        ..Default::default()
    };
    let mut sa_groups = Vec::new();
    match user
        .strip_prefix(SA_PREFIX)
        .and_then(|rest| rest.split_once(':'))
    {
        Some((ns, name)) => {
            checks.push(ask("", "serviceaccounts", "", ns, name));
            sa_groups = vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{ns}"),
            ];
        }
        None => checks.push(ask("", "users", "", "", &user)),
    }
    for g in &groups {
        checks.push(ask("", "groups", "", "", g));
    }
    for (key, vals) in &extra {
        for v in vals {
            checks.push(ask("authentication.k8s.io", "userextras", key, "", v));
        }
    }
    if let Some(uid) = &uid {
        checks.push(ask("authentication.k8s.io", "uids", "", "", uid));
    }
    for attrs in checks {
        match authz.authorize(requestor, attrs.clone()).await {
            Ok(Decision::Allow) => {}
            Ok(Decision::Deny(reason)) => {
                return Err(answers::forbidden(
                    requestor.name(),
                    &attrs,
                    &reason,
                    error_form,
                ));
            }
            Err(err) => {
                tracing::warn!(error = %err, "impersonation check failed");
                return Err(Status::internal(err).into_response());
            }
        }
    }
    let mut all_groups = if groups.is_empty() { sa_groups } else { groups };
    if user == ANONYMOUS {
        if !all_groups.iter().any(|g| g == UNAUTHENTICATED) {
            all_groups.push(UNAUTHENTICATED.into());
        }
    } else if !all_groups.iter().any(|g| g == AUTHENTICATED) {
        all_groups.push(AUTHENTICATED.into());
    }
    headers.remove(IMPERSONATE_USER);
    headers.remove(IMPERSONATE_GROUP);
    headers.remove(IMPERSONATE_UID);
    let extra_names: Vec<_> = headers
        .keys()
        .filter(|k| k.as_str().starts_with(IMPERSONATE_EXTRA_PREFIX))
        .cloned()
        .collect();
    for k in extra_names {
        headers.remove(k);
    }
    Ok(Some(Arc::new(User::new(UserInfo {
        name: user,
        uid: uid.unwrap_or_default(),
        groups: all_groups,
        extra,
    }))))
}
