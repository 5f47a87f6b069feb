//! Validation of write requests: object names, request options, and the `field.Error`
//! → `metav1.Status` (422 Invalid) conversion.
//!
//! Message texts follow k8s.io/apimachinery:
//! - `pkg/util/validation/validation.go` (`IsDNS1123Subdomain`, `IsDNS1123Label`,
//!   `IsDNS1035Label`, `RegexError`, `MaxLenError`);
//! - `pkg/util/validation/field/errors.go` (`Error.ErrorBody`, the `Invalid value: "x": …`
//!   shape, `NotSupported`'s `supported values: "A", "B"`);
//! - `pkg/api/errors/errors.go` `NewInvalid` (`Pod "x" is invalid: <aggregate>`; several
//!   errors print as `[a, b]`, one prints bare);
//! - `pkg/apis/meta/v1/validation/validation.go` (`ValidateDryRun`, `ValidateFieldManager`,
//!   `ValidatePatchOptions`, `ValidateDeleteOptions`, `ValidateFieldValidation`).

// metav1.Status is the error type of every write step (as in the store API); boxing it
// would only add noise to the happy path, which it never slows.
#![allow(clippy::result_large_err)]

use crate::status::{Cause, Status};

/// One `field.Error`. `value` is already rendered the way `ErrorBody` prints it
/// (`"x"` for strings via `%q`, `[]string{"x"}` for slices via `%#v`, bare for numbers),
/// or None for the types that print no value (Required, Forbidden, TooLong).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub kind: ErrorKind,
    pub field: String,
    pub value: Option<String>,
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Required,
    Invalid,
    NotSupported,
    Forbidden,
    Duplicate,
    TooLong,
}

impl ErrorKind {
    /// `field.ErrorType.String()`.
    fn text(self) -> &'static str {
        match self {
            ErrorKind::Required => "Required value",
            ErrorKind::Invalid => "Invalid value",
            ErrorKind::NotSupported => "Unsupported value",
            ErrorKind::Forbidden => "Forbidden",
            ErrorKind::Duplicate => "Duplicate value",
            ErrorKind::TooLong => "Too long",
        }
    }

    /// The `metav1.CauseType` (`field.ErrorType` string value).
    fn cause_type(self) -> &'static str {
        match self {
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::Invalid => "FieldValueInvalid",
            ErrorKind::NotSupported => "FieldValueNotSupported",
            ErrorKind::Forbidden => "FieldValueForbidden",
            ErrorKind::Duplicate => "FieldValueDuplicate",
            ErrorKind::TooLong => "FieldValueTooLong",
        }
    }
}

/// Go's `%q` for a string: double-quoted with Go escapes. Close enough to strconv.Quote
/// for the printable ASCII and UTF-8 text names and options contain.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `%#v` of a `[]string`.
pub fn go_string_slice(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[]string{{{}}}", inner.join(", "))
}

impl FieldError {
    pub fn required(field: &str, detail: &str) -> Self {
        Self {
            kind: ErrorKind::Required,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// `field.Invalid` with a string value.
    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Self {
            kind: ErrorKind::Invalid,
            field: field.into(),
            value: Some(go_quote(value)),
            detail: detail.into(),
        }
    }

    /// `field.Invalid` with a pre-rendered value (numbers, `0x0`, slices).
    pub fn invalid_raw(field: &str, rendered: String, detail: &str) -> Self {
        Self {
            kind: ErrorKind::Invalid,
            field: field.into(),
            value: Some(rendered),
            detail: detail.into(),
        }
    }

    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self {
            kind: ErrorKind::Forbidden,
            field: field.into(),
            value: None,
            detail: detail.into(),
        }
    }

    /// `field.NotSupported(path, value, valid)`: detail `supported values: "A", "B"`.
    pub fn not_supported(field: &str, rendered: String, valid: &[&str]) -> Self {
        let quoted: Vec<String> = valid.iter().map(|v| go_quote(v)).collect();
        Self {
            kind: ErrorKind::NotSupported,
            field: field.into(),
            value: Some(rendered),
            detail: format!("supported values: {}", quoted.join(", ")),
        }
    }

    /// `Error.ErrorBody()`.
    pub fn body(&self) -> String {
        let mut s = self.kind.text().to_string();
        if let Some(v) = &self.value {
            s.push_str(": ");
            s.push_str(v);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    /// `Error.Error()`: `<field>: <body>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// `errors.NewInvalid(qualifiedKind, name, errs)`. `group` empty for the core group;
/// the message prints `Kind.group` (`GroupKind.String()`), `details.kind` is the Kind.
pub fn invalid(group: &str, kind: &str, name: &str, errs: &[FieldError]) -> Status {
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    // utilerrors.NewAggregate: one error prints bare, several as `[a, b]`.
    let message = match errs.len() {
        0 => format!("{qualified} {} is invalid", go_quote(name)),
        1 => format!("{qualified} {} is invalid: {}", go_quote(name), errs[0]),
        _ => {
            let parts: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
            format!(
                "{qualified} {} is invalid: [{}]",
                go_quote(name),
                parts.join(", ")
            )
        }
    };
    let mut s = Status::new(422, "Invalid", message);
    s.with_details = true;
    if !name.is_empty() {
        s.name = Some(name.to_string());
    }
    if !group.is_empty() {
        s.group = Some(group.to_string());
    }
    s.kind = Some(kind.to_string());
    s.causes = errs
        .iter()
        .map(|e| Cause {
            reason: e.kind.cause_type().to_string(),
            message: e.body(),
            field: Some(e.field.clone()),
        })
        .collect();
    s
}

/// `NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "<Verb>Options"}, "", errs)`,
/// the answer for bad query options (dryRun, fieldManager, propagationPolicy, …).
pub fn invalid_options(options_kind: &str, errs: &[FieldError]) -> Status {
    invalid("meta.k8s.io", options_kind, "", errs)
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";

/// `validation.RegexError(msg, fmt, examples...)`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut s = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str(" or ");
        }
        s.push('\'');
        s.push_str(e);
        s.push_str("', ");
    }
    s.push_str(&format!("regex used for validation is '{fmt}')"));
    s
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

fn label_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum(c) || c == b'-')
}

fn dns1035_ok(s: &str) -> bool {
    label_ok(s) && s.as_bytes()[0].is_ascii_lowercase()
}

fn subdomain_ok(s: &str) -> bool {
    s.split('.').all(label_ok)
}

/// Which name rule a type uses (the registry strategy's `ValidateXName`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// `NameIsDNSSubdomain`: pods, configmaps, secrets, nodes, endpoints, events,
    /// deployments, custom resources.
    Subdomain,
    /// `NameIsDNSLabel`: namespaces.
    Label,
    /// `NameIsDNS1035Label`: services.
    Dns1035,
}

impl NameRule {
    pub fn for_resource(group: &str, resource: &str) -> Self {
        match (group, resource) {
            ("", "namespaces") => NameRule::Label,
            ("", "services") => NameRule::Dns1035,
            _ => NameRule::Subdomain,
        }
    }
}

/// The messages `IsDNS1123Subdomain` / `IsDNS1123Label` / `IsDNS1035Label` return.
/// `prefix` is the generateName mode (`maskTrailingDash`: a trailing '-' is allowed).
pub fn name_messages(rule: NameRule, name: &str, prefix: bool) -> Vec<String> {
    let mut value = name.to_string();
    if prefix && value.len() > 1 && value.ends_with('-') {
        // maskTrailingDash replaces the dash with 'a' so "web-" validates.
        value.pop();
        value.push('a');
    }
    let mut out = Vec::new();
    match rule {
        NameRule::Subdomain => {
            if value.len() > 253 {
                out.push("must be no more than 253 characters".to_string());
            }
            if !subdomain_ok(&value) {
                out.push(regex_error(
                    DNS1123_SUBDOMAIN_ERR,
                    DNS1123_SUBDOMAIN_FMT,
                    &["example.com"],
                ));
            }
        }
        NameRule::Label => {
            if value.len() > 63 {
                out.push("must be no more than 63 characters".to_string());
            }
            if !label_ok(&value) {
                out.push(regex_error(
                    DNS1123_LABEL_ERR,
                    DNS1123_LABEL_FMT,
                    &["my-name", "123-abc"],
                ));
            }
        }
        NameRule::Dns1035 => {
            if value.len() > 63 {
                out.push("must be no more than 63 characters".to_string());
            }
            if !dns1035_ok(&value) {
                out.push(regex_error(
                    DNS1035_LABEL_ERR,
                    DNS1035_LABEL_FMT,
                    &["my-name", "abc-123"],
                ));
            }
        }
    }
    out
}

/// The metadata part of `ValidateObjectMeta` that a create can get wrong: name or
/// generateName present, and both well-formed.
pub fn validate_object_meta_names(
    rule: NameRule,
    name: &str,
    generate_name: &str,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !generate_name.is_empty() {
        for msg in name_messages(rule, generate_name, true) {
            errs.push(FieldError::invalid(
                "metadata.generateName",
                generate_name,
                &msg,
            ));
        }
    }
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for msg in name_messages(rule, name, false) {
            errs.push(FieldError::invalid("metadata.name", name, &msg));
        }
    }
    errs
}

/// The `dryRun` query values. Only `All` is accepted (`ValidateDryRun`).
pub fn validate_dry_run(values: &[String]) -> Vec<FieldError> {
    if values.iter().all(|v| v == "All") {
        Vec::new()
    } else {
        vec![FieldError::not_supported(
            "dryRun",
            go_string_slice(values),
            &["All"],
        )]
    }
}

/// `ValidateFieldManager`: at most 128 bytes, printable characters only.
pub fn validate_field_manager(manager: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if manager.len() > 128 {
        errs.push(FieldError {
            kind: ErrorKind::TooLong,
            field: "fieldManager".into(),
            value: None,
            detail: "may not be more than 128 bytes".into(),
        });
    }
    for (i, c) in manager.char_indices() {
        if c.is_control() {
            errs.push(FieldError::invalid(
                "fieldManager",
                manager,
                &format!("invalid character U+{:04X} (at position {i})", c as u32),
            ));
        }
    }
    errs
}

/// `ValidateFieldValidation`: "", Ignore, Warn or Strict.
pub fn validate_field_validation(value: &str) -> Vec<FieldError> {
    match value {
        "" | "Ignore" | "Warn" | "Strict" => Vec::new(),
        other => vec![FieldError::not_supported(
            "fieldValidation",
            go_quote(other),
            &["", "Ignore", "Strict", "Warn"],
        )],
    }
}

/// `ValidateDeleteOptions`' propagationPolicy check.
pub fn validate_propagation_policy(policy: Option<&str>) -> Vec<FieldError> {
    match policy {
        None | Some("Foreground") | Some("Background") | Some("Orphan") => Vec::new(),
        Some(other) => vec![FieldError::not_supported(
            "propagationPolicy",
            go_quote(other),
            &["Foreground", "Background", "Orphan", "nil"],
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomain_message_matches_apimachinery() {
        let errs = validate_object_meta_names(NameRule::Subdomain, "Bad_Name", "");
        let s = invalid("", "Pod", "Bad_Name", &errs);
        assert_eq!(
            s.message,
            "Pod \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        assert_eq!(s.code, 422);
        assert_eq!(s.causes[0].reason, "FieldValueInvalid");
        assert_eq!(s.causes[0].field.as_deref(), Some("metadata.name"));
    }

    #[test]
    fn label_message_has_two_examples() {
        let m = name_messages(NameRule::Label, "A", false);
        assert_eq!(m, vec!["a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".to_string()]);
    }

    #[test]
    fn missing_name() {
        let errs = validate_object_meta_names(NameRule::Subdomain, "", "");
        let s = invalid("apps", "Deployment", "", &errs);
        assert_eq!(
            s.message,
            "Deployment.apps \"\" is invalid: metadata.name: Required value: name or generateName is required"
        );
        assert_eq!(s.name, None);
        assert_eq!(s.group.as_deref(), Some("apps"));
    }

    #[test]
    fn generate_name_with_trailing_dash_is_fine() {
        assert!(validate_object_meta_names(NameRule::Subdomain, "web-abcde", "web-").is_empty());
        assert_eq!(
            validate_object_meta_names(NameRule::Subdomain, "", "Web-").len(),
            2
        );
    }

    #[test]
    fn dry_run_values() {
        assert!(validate_dry_run(&["All".into()]).is_empty());
        let s = invalid_options("CreateOptions", &validate_dry_run(&["Some".into()]));
        assert_eq!(
            s.message,
            "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Some\"}: supported values: \"All\""
        );
    }

    #[test]
    fn many_errors_are_bracketed() {
        let long = "a".repeat(300) + "_";
        let errs = validate_object_meta_names(NameRule::Subdomain, &long, "");
        let s = invalid("", "ConfigMap", &long, &errs);
        assert!(s.message.contains(": [metadata.name: Invalid value"));
        assert!(s
            .message
            .contains("must be no more than 253 characters, metadata.name"));
    }
}
