//! What a button or link says it does: the one list of words that make a click consequential
//! (it deletes, buys, pays, sends, transfers, confirms...), in several languages, matched on
//! normalised text.
//!
//! Normalising: lower case, Latin letters without their accents (`Löschen` → `loschen`,
//! `Supprimer` stays, `Bestätigen` → `bestatigen`), every run of anything else one space. A
//! phrase matches whole words in order (`check out` does not match `checkout`, which has its own
//! entry); a word of the list also matches with a plural `s` (`Orders` is not `order`, though:
//! nouns of navigation are listed as phrases only where needed).
//!
//! ```
//! use gg_agent::gate::{consequential_kind, ActionKind};
//! assert_eq!(consequential_kind("  Delete my account "), Some(ActionKind::Destructive));
//! assert_eq!(consequential_kind("Jetzt kaufen"), Some(ActionKind::Purchase));
//! assert_eq!(consequential_kind("Bestätigen"), Some(ActionKind::Confirm));
//! assert_eq!(consequential_kind("Show details"), None);
//! ```

use serde::{Deserialize, Serialize};

/// What a consequential click does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// Deletes or removes something, closes an account, cancels a contract.
    Destructive,
    /// Buys, pays, orders, subscribes, donates.
    Purchase,
    /// Sends, transfers, publishes: something leaves the user's hands.
    Send,
    /// Confirms or approves whatever the page has prepared.
    Confirm,
}

impl ActionKind {
    /// Words for the user: "delete or remove something".
    pub fn describe(self) -> &'static str {
        match self {
            Self::Destructive => "delete or remove something",
            Self::Purchase => "buy or pay for something",
            Self::Send => "send or transfer something",
            Self::Confirm => "confirm or approve something",
        }
    }
}

/// The list: normalised words or phrases, and what they mean. English, German, French,
/// Spanish, Italian, Portuguese, Dutch.
const CONSEQUENTIAL: &[(&str, ActionKind)] = &[
    // Destructive.
    ("delete", ActionKind::Destructive),
    ("remove", ActionKind::Destructive),
    ("erase", ActionKind::Destructive),
    ("destroy", ActionKind::Destructive),
    ("discard", ActionKind::Destructive),
    ("wipe", ActionKind::Destructive),
    ("trash", ActionKind::Destructive),
    ("deactivate", ActionKind::Destructive),
    ("terminate", ActionKind::Destructive),
    ("revoke", ActionKind::Destructive),
    ("unsubscribe", ActionKind::Destructive),
    ("close account", ActionKind::Destructive),
    ("close my account", ActionKind::Destructive),
    ("cancel subscription", ActionKind::Destructive),
    ("cancel my subscription", ActionKind::Destructive),
    ("cancel order", ActionKind::Destructive),
    ("loschen", ActionKind::Destructive),
    ("entfernen", ActionKind::Destructive),
    ("kundigen", ActionKind::Destructive),
    ("supprimer", ActionKind::Destructive),
    ("effacer", ActionKind::Destructive),
    ("retirer", ActionKind::Destructive),
    ("resilier", ActionKind::Destructive),
    ("eliminar", ActionKind::Destructive),
    ("borrar", ActionKind::Destructive),
    ("suprimir", ActionKind::Destructive),
    ("elimina", ActionKind::Destructive),
    ("eliminare", ActionKind::Destructive),
    ("cancella", ActionKind::Destructive),
    ("rimuovi", ActionKind::Destructive),
    ("excluir", ActionKind::Destructive),
    ("apagar", ActionKind::Destructive),
    ("remover", ActionKind::Destructive),
    ("verwijderen", ActionKind::Destructive),
    ("verwijder", ActionKind::Destructive),
    // Purchase.
    ("buy", ActionKind::Purchase),
    ("purchase", ActionKind::Purchase),
    ("pay", ActionKind::Purchase),
    ("checkout", ActionKind::Purchase),
    ("check out", ActionKind::Purchase),
    ("place order", ActionKind::Purchase),
    ("place your order", ActionKind::Purchase),
    ("order now", ActionKind::Purchase),
    ("complete order", ActionKind::Purchase),
    ("subscribe", ActionKind::Purchase),
    ("donate", ActionKind::Purchase),
    ("book now", ActionKind::Purchase),
    ("kaufen", ActionKind::Purchase),
    ("bezahlen", ActionKind::Purchase),
    ("bestellen", ActionKind::Purchase),
    ("zahlungspflichtig", ActionKind::Purchase),
    ("acheter", ActionKind::Purchase),
    ("payer", ActionKind::Purchase),
    ("commander", ActionKind::Purchase),
    ("comprar", ActionKind::Purchase),
    ("pagar", ActionKind::Purchase),
    ("realizar pedido", ActionKind::Purchase),
    ("acquista", ActionKind::Purchase),
    ("paga", ActionKind::Purchase),
    ("ordina", ActionKind::Purchase),
    ("finalizar compra", ActionKind::Purchase),
    ("kopen", ActionKind::Purchase),
    ("betalen", ActionKind::Purchase),
    ("afrekenen", ActionKind::Purchase),
    // Send.
    ("send", ActionKind::Send),
    ("transfer", ActionKind::Send),
    ("wire", ActionKind::Send),
    ("withdraw", ActionKind::Send),
    ("publish", ActionKind::Send),
    ("senden", ActionKind::Send),
    ("absenden", ActionKind::Send),
    ("uberweisen", ActionKind::Send),
    ("veroffentlichen", ActionKind::Send),
    ("envoyer", ActionKind::Send),
    ("transferer", ActionKind::Send),
    ("virement", ActionKind::Send),
    ("publier", ActionKind::Send),
    ("enviar", ActionKind::Send),
    ("transferir", ActionKind::Send),
    ("publicar", ActionKind::Send),
    ("invia", ActionKind::Send),
    ("trasferisci", ActionKind::Send),
    ("pubblica", ActionKind::Send),
    ("verzenden", ActionKind::Send),
    ("versturen", ActionKind::Send),
    ("overmaken", ActionKind::Send),
    // Confirm.
    ("confirm", ActionKind::Confirm),
    ("approve", ActionKind::Confirm),
    ("authorize", ActionKind::Confirm),
    ("authorise", ActionKind::Confirm),
    ("bestatigen", ActionKind::Confirm),
    ("genehmigen", ActionKind::Confirm),
    ("confirmer", ActionKind::Confirm),
    ("valider", ActionKind::Confirm),
    ("confirmar", ActionKind::Confirm),
    ("conferma", ActionKind::Confirm),
    ("bevestigen", ActionKind::Confirm),
];

/// The Latin letter without its accent, for the letters of the languages above.
fn fold(c: char) -> char {
    match c {
        'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' => 'a',
        'ç' => 'c',
        'è' | 'é' | 'ê' | 'ë' => 'e',
        'ì' | 'í' | 'î' | 'ï' => 'i',
        'ñ' => 'n',
        'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' => 'o',
        'ù' | 'ú' | 'û' | 'ü' => 'u',
        'ý' | 'ÿ' => 'y',
        'ß' => 's',
        c => c,
    }
}

/// Lower case, accents folded, words separated by single spaces.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = true;
    for c in text.chars().flat_map(char::to_lowercase).map(fold) {
        if c.is_alphanumeric() {
            out.push(c);
            space = false;
        } else if !space {
            out.push(' ');
            space = true;
        }
    }
    if out.ends_with(' ') {
        out.pop();
    }
    out
}

/// Whether the words of `phrase` occur in `words` in order, one after the other; the last word
/// may carry a plural `s`.
fn contains_phrase(words: &[&str], phrase: &str) -> bool {
    let wanted: Vec<&str> = phrase.split(' ').collect();
    if wanted.is_empty() || words.len() < wanted.len() {
        return false;
    }
    words.windows(wanted.len()).any(|window| {
        window
            .iter()
            .zip(&wanted)
            .enumerate()
            .all(|(i, (got, want))| {
                got == want
                    || (i + 1 == wanted.len()
                        && got.strip_suffix('s') == Some(want)
                        && want.len() > 3)
            })
    })
}

/// What `text` (a button's text, a label, an `aria-label`) says the click does, if it is one of
/// the consequential actions of the list. The first kind in the list's order wins.
pub fn consequential_kind(text: &str) -> Option<ActionKind> {
    let normalized = normalize(text);
    let words: Vec<&str> = normalized.split(' ').filter(|w| !w.is_empty()).collect();
    CONSEQUENTIAL
        .iter()
        .find(|(phrase, _)| contains_phrase(&words, phrase))
        .map(|(_, kind)| *kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_case_accents_and_separators() {
        assert_eq!(normalize("  Löschen!! — Sofort "), "loschen sofort");
        assert_eq!(normalize("Résilier\tl'abonnement"), "resilier l abonnement");
        assert_eq!(normalize("Überweisen"), "uberweisen");
        assert_eq!(normalize("…"), "");
    }

    #[test]
    fn the_list_is_normalized_and_without_repeats() {
        let mut seen = std::collections::BTreeSet::new();
        for (phrase, _) in CONSEQUENTIAL {
            assert_eq!(normalize(phrase), *phrase, "write list entries normalised");
            assert!(seen.insert(*phrase), "{phrase} is listed twice");
        }
    }

    #[test]
    fn matches_whole_words_and_plurals() {
        assert_eq!(consequential_kind("Delete"), Some(ActionKind::Destructive));
        assert_eq!(
            consequential_kind("Remove items"),
            Some(ActionKind::Destructive)
        );
        assert_eq!(
            consequential_kind("Place orders"),
            Some(ActionKind::Purchase)
        );
        assert_eq!(consequential_kind("Paying guests"), None);
        assert_eq!(consequential_kind("Sender address"), None);
        assert_eq!(consequential_kind("Repay"), None);
        assert_eq!(
            consequential_kind("Check out now"),
            Some(ActionKind::Purchase)
        );
        assert_eq!(consequential_kind("Ir a pagar"), Some(ActionKind::Purchase));
        assert_eq!(
            consequential_kind("Envoyer le message"),
            Some(ActionKind::Send)
        );
        assert_eq!(consequential_kind(""), None);
    }
}
