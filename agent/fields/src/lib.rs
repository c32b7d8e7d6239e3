//! Which form fields hold secrets: passwords, one-time codes, payment cards and hidden inputs.
//!
//! One classification for both sides of the extension: the agent's safety gate asks before
//! typing into such a field, and the in-page tools never show such a field's value to the model
//! (a snapshot says only whether it is filled; copied markup loses its `value`). `no_std` with
//! `alloc`, no dependencies, so the content script (compiled to plain JS) links it too.
//!
//! The field is judged, in order, by `autocomplete` (`current-password`, `new-password`,
//! `one-time-code`, `cc-*`), `type=password`, then words in its name, id, label, placeholder
//! and `aria-label` (`password`, `cvv`, `otp`, `card number`... in several languages, matched on
//! words split at case changes and punctuation), then whether it is hidden.
//!
//! ```
//! use gg_fields::{Field, SecretKind};
//!
//! let otp = Field { autocomplete: Some("one-time-code"), ..Field::default() };
//! assert_eq!(otp.secret_kind(), Some(SecretKind::OneTimeCode));
//! let card = Field { name: Some("ccNumber"), ..Field::default() };
//! assert_eq!(card.secret_kind(), Some(SecretKind::PaymentCard));
//! let csrf = Field { input_type: Some("hidden"), name: Some("csrf_token"), ..Field::default() };
//! assert_eq!(csrf.secret_kind(), Some(SecretKind::Hidden));
//! assert_eq!(Field { name: Some("q"), ..Field::default() }.secret_kind(), None);
//! ```

#![no_std]

extern crate alloc;

use alloc::string::String;
use alloc::vec::Vec;

/// The kind of secret a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SecretKind {
    /// A password (`type=password`, `autocomplete=*-password`, a password-like name).
    Password,
    /// A one-time or verification code.
    OneTimeCode,
    /// A payment card number, security code, expiry or bank account.
    PaymentCard,
    /// A hidden input (CSRF tokens, ids) or a field hidden from view.
    Hidden,
}

/// What is known of a field, as written in its markup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Field<'a> {
    /// `autocomplete`.
    pub autocomplete: Option<&'a str>,
    /// `type` of an `<input>`.
    pub input_type: Option<&'a str>,
    /// `name`.
    pub name: Option<&'a str>,
    /// `id`.
    pub id: Option<&'a str>,
    /// The text of its label.
    pub label: Option<&'a str>,
    /// `placeholder`.
    pub placeholder: Option<&'a str>,
    /// `aria-label`.
    pub aria_label: Option<&'a str>,
    /// Hidden from view (CSS, `hidden`, zero size...), as the caller judged.
    pub hidden: bool,
}

impl Field<'_> {
    /// The kind of secret this field holds, if any (see the [crate docs](crate)).
    pub fn secret_kind(&self) -> Option<SecretKind> {
        if let Some(autocomplete) = self.autocomplete {
            for token in autocomplete.split_ascii_whitespace() {
                let token = token.to_ascii_lowercase();
                match token.as_str() {
                    "current-password" | "new-password" => return Some(SecretKind::Password),
                    "one-time-code" => return Some(SecretKind::OneTimeCode),
                    t if t.starts_with("cc-") => return Some(SecretKind::PaymentCard),
                    _ => {}
                }
            }
        }
        let input_type = self.input_type.map(str::trim);
        if input_type.is_some_and(|t| t.eq_ignore_ascii_case("password")) {
            return Some(SecretKind::Password);
        }
        let texts = [
            self.name,
            self.id,
            self.label,
            self.placeholder,
            self.aria_label,
        ];
        let mut all_words = Vec::new();
        for text in texts.into_iter().flatten() {
            all_words.extend(words(text));
        }
        let joined: String = all_words.concat();
        let has_marker = |markers: &[&str]| markers.iter().any(|m| joined.contains(m));
        let has_word = |list: &[&str]| all_words.iter().any(|w| list.contains(&w.as_str()));
        if has_marker(PASSWORD_MARKERS) {
            Some(SecretKind::Password)
        } else if has_marker(OTP_MARKERS) || has_word(OTP_WORDS) {
            Some(SecretKind::OneTimeCode)
        } else if has_marker(CARD_MARKERS) || has_word(CARD_WORDS) {
            Some(SecretKind::PaymentCard)
        } else if self.hidden || input_type.is_some_and(|t| t.eq_ignore_ascii_case("hidden")) {
            Some(SecretKind::Hidden)
        } else {
            None
        }
    }
}

/// The words of `text`, lowercase, split at anything but letters and digits and where a
/// lowercase letter or digit is followed by an uppercase one (`cardNumber_2` -> `card`,
/// `number`, `2`).
///
/// Lowercase means ASCII lowercase, plus the two letters whose Unicode lowercase has an ASCII
/// letter (the Kelvin sign `K` and the dotted capital `İ`); other letters keep their case. Every
/// marker is ASCII, so a field matches exactly as with full Unicode lowercasing, and the
/// content script and the widget's main thread do without Unicode's lowercase table (11 KB).
pub fn words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                words.push(core::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower && !current.is_empty() {
            words.push(core::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        match c {
            '\u{212A}' => current.push('k'),
            '\u{130}' => current.push_str("i\u{307}"),
            c => current.push(c.to_ascii_lowercase()),
        }
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

const PASSWORD_MARKERS: &[&str] = &["password", "passwd", "passwort", "contrasena", "motdepasse"];
const CARD_MARKERS: &[&str] = &[
    "cardnumber",
    "ccnumber",
    "ccnum",
    "creditcard",
    "debitcard",
    "securitycode",
    "cardcode",
    "cardverification",
    "cardexpiry",
    "cardexpiration",
    "kartennummer",
    "kreditkarte",
    "numerodecarte",
    "numerotarjeta",
    "routingnumber",
    "accountnumber",
];
const CARD_WORDS: &[&str] = &["cvv", "cvc", "csc", "cvv2", "cvc2", "iban", "bic"];
const OTP_MARKERS: &[&str] = &[
    "onetimecode",
    "onetimepassword",
    "onetimepasscode",
    "verificationcode",
    "authcode",
    "authenticationcode",
    "smscode",
    "twofactor",
    "passcode",
];
const OTP_WORDS: &[&str] = &["otp", "totp", "hotp", "2fa", "mfa"];

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn words_split_at_case_and_punctuation() {
        assert_eq!(
            words("cardNumber_2 XMLHttp"),
            vec!["card", "number", "2", "xmlhttp"]
        );
    }

    #[test]
    fn markers_match_as_with_unicode_lowercase() {
        let unicode = |text: &str| -> Vec<String> {
            words(text)
                .iter()
                .map(|w| w.chars().flat_map(char::to_lowercase).collect())
                .collect()
        };
        for text in [
            "ÜberPASSWORD",
            "Contraseña",
            "NÚMERO de tarjeta",
            "\u{212A}REDITKARTE",
            "İBAN",
            "ΚΩΔΙΚΌΣ",
            "cardNumber_2 XMLHttp",
        ] {
            let ours = words(text);
            let theirs = unicode(text);
            for marker in PASSWORD_MARKERS
                .iter()
                .chain(CARD_MARKERS)
                .chain(OTP_MARKERS)
            {
                assert_eq!(
                    ours.concat().contains(marker),
                    theirs.concat().contains(marker),
                    "{text} {marker}"
                );
            }
            for word in CARD_WORDS.iter().chain(OTP_WORDS) {
                assert_eq!(
                    ours.iter().any(|w| w == word),
                    theirs.iter().any(|w| w == word),
                    "{text} {word}"
                );
            }
        }
        assert_eq!(words("\u{212A}REDITKARTE"), vec!["kreditkarte"]);
    }

    #[test]
    fn kinds() {
        let f = |name: &str| {
            Field {
                name: Some(name),
                ..Field::default()
            }
            .secret_kind()
        };
        assert_eq!(f("user_password"), Some(SecretKind::Password));
        assert_eq!(f("Passwort"), Some(SecretKind::Password));
        assert_eq!(f("otp"), Some(SecretKind::OneTimeCode));
        assert_eq!(f("verificationCode"), Some(SecretKind::OneTimeCode));
        assert_eq!(f("cvc"), Some(SecretKind::PaymentCard));
        assert_eq!(f("iban"), Some(SecretKind::PaymentCard));
        assert_eq!(f("email"), None);
        assert_eq!(f("topping"), None, "otp inside a word is not a code");
        let typed = Field {
            input_type: Some(" PASSWORD "),
            ..Field::default()
        };
        assert_eq!(typed.secret_kind(), Some(SecretKind::Password));
        let hidden = Field {
            name: Some("q"),
            hidden: true,
            ..Field::default()
        };
        assert_eq!(hidden.secret_kind(), Some(SecretKind::Hidden));
        let auto = Field {
            autocomplete: Some("section-x cc-exp"),
            ..Field::default()
        };
        assert_eq!(auto.secret_kind(), Some(SecretKind::PaymentCard));
    }
}
