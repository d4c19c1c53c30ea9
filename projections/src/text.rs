//! The backend's own localized texts (instructions, labels, the plan status line) in `de` and
//! `en`. Curriculum texts come from the pack; these are the product's.

use aggregates::learning_journey::Mode;

use crate::full_context::RequiredAction;

/// A language the product speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    /// German (the server default).
    De,
    /// English, for every `en` locale.
    En,
}

impl Lang {
    /// The language's two-letter tag.
    pub fn tag(self) -> &'static str {
        match self {
            Self::De => "de",
            Self::En => "en",
        }
    }

    /// The language of a locale tag; German for anything not English (the server default).
    pub fn of(locale: &str) -> Self {
        if locale.starts_with("en") {
            Self::En
        } else {
            Self::De
        }
    }
}

/// The instruction that goes with a required action.
pub fn instruction(lang: Lang, action: RequiredAction) -> &'static str {
    use RequiredAction::*;
    match (lang, action) {
        (Lang::De, ChooseOption) => "Stelle die Optionen vor und ordne die Antwort der lernenden Person genau einer Option zu; frage nur bei echter Mehrdeutigkeit nach.",
        (Lang::En, ChooseOption) => "Present the options and map the learner's answer to exactly one of them; ask only if it is truly ambiguous.",
        (Lang::De, TeachActiveGoal) => "Unterrichte das aktive Ziel. Wenn Verständnis gezeigt ist und die lernende Person zustimmt, schließe das Ziel ab.",
        (Lang::En, TeachActiveGoal) => "Teach the active goal. When understanding is shown and the learner agrees, complete the goal.",
        (Lang::De, OfferVerifiedRecall) => "Karten sind fällig. Biete eine Abfrage an und starte sie nur mit Zustimmung.",
        (Lang::En, OfferVerifiedRecall) => "Cards are due. Offer a recall check and start it only with consent.",
        (Lang::De, AnswerVerifiedRecall) => "Zeige alle Fragen und warte, bis jede beantwortet ist; gib dann die Sollantworten frei.",
        (Lang::En, AnswerVerifiedRecall) => "Show all questions and wait until each is answered; then release the reference answers.",
        (Lang::De, RecordVerifiedRecall) => "Beurteile jede Antwort nach ihrer Bedeutung, gib Rückmeldung, hole die Zustimmung ein und speichere dann die Ergebnisse.",
        (Lang::En, RecordVerifiedRecall) => "Judge each answer by its meaning, give feedback, get consent, then store the results.",
        (Lang::De, OfferExam) => "Die Prüfung ist freigegeben. Biete sie an und starte sie nur mit Zustimmung; möchte die lernende Person sie nicht ablegen, wähle die Option zum Abschließen ohne Prüfung.",
        (Lang::En, OfferExam) => "The exam is released. Offer it and start it only with consent; if the learner does not want to take it, choose the option to finish without the exam.",
        (Lang::De, AnswerExam) => "Zeige alle Aufgaben und warte auf die vollständige Bearbeitung; gib dann die Lösungen frei.",
        (Lang::En, AnswerExam) => "Show all tasks and wait for the complete work; then release the solutions.",
        (Lang::De, RecordExam) => "Bewerte jede Aufgabe mit Punkten, gib Rückmeldung, hole die Zustimmung ein und speichere dann die Punkte.",
        (Lang::En, RecordExam) => "Score each task, give feedback, get consent, then store the scores.",
        (Lang::De, AwaitLearnerContinuation) => "Präsentiere nichts Neues, bis die lernende Person weitermachen möchte; dann wähle die Weiter-Option.",
        (Lang::En, AwaitLearnerContinuation) => "Present nothing new until the learner wants to go on; then choose the continue option.",
        (Lang::De, ConfirmCompletion) => "Im aktuellen Fokus ist nichts mehr offen. Bestätige den Abschluss.",
        (Lang::En, ConfirmCompletion) => "Nothing is left in the current focus. Confirm the completion.",
    }
}

/// The factual plan status line.
pub fn status_line(lang: Lang, today: u32, today_target: u32, week: u32, week_target: u32) -> String {
    match lang {
        Lang::De => format!("Heute {today} von {today_target} Zielen, diese Woche {week} von {week_target}."),
        Lang::En => format!("Today {today} of {today_target} goals, this week {week} of {week_target}."),
    }
}

/// Label of a mode option.
pub fn mode_label(lang: Lang, mode: Mode) -> &'static str {
    match (lang, mode) {
        (Lang::De, Mode::Learn) => "Das nächste Ziel lernen",
        (Lang::En, Mode::Learn) => "Learn the next goal",
        (Lang::De, Mode::VerifiedRecall) => "Gelerntes abfragen",
        (Lang::En, Mode::VerifiedRecall) => "Check what I have learned",
    }
}

/// The label of the option that finishes without the released exam.
pub fn decline_exam_label(lang: Lang) -> &'static str {
    match lang {
        Lang::De => "Ohne Prüfung abschließen",
        Lang::En => "Finish without the exam",
    }
}

/// The label of the option that presents the pre-selected successor.
pub fn continue_label(lang: Lang) -> &'static str {
    match lang {
        Lang::De => "Weitermachen",
        Lang::En => "Continue",
    }
}

/// Label of a locale option.
pub fn locale_label(lang: Lang, locale: &str) -> String {
    let name = match (lang, locale) {
        (Lang::De, "en") => "Englisch",
        (Lang::De, "de") => "Deutsch",
        (Lang::En, "en") => "English",
        (Lang::En, "de") => "German",
        (_, other) => other,
    };
    match lang {
        Lang::De => format!("Sprache: {name}"),
        Lang::En => format!("Language: {name}"),
    }
}

/// Label of a focus option: an area's title, or the whole curriculum.
pub fn focus_label(lang: Lang, area: Option<&str>) -> String {
    match (lang, area) {
        (Lang::De, Some(title)) => format!("Fokus: {title}"),
        (Lang::En, Some(title)) => format!("Focus: {title}"),
        (Lang::De, None) => "Fokus: das ganze Curriculum".to_owned(),
        (Lang::En, None) => "Focus: the whole curriculum".to_owned(),
    }
}

/// Label of an autopilot option.
pub fn autopilot_label(lang: Lang, on: bool) -> &'static str {
    match (lang, on) {
        (Lang::De, true) => "Autopilot einschalten",
        (Lang::De, false) => "Autopilot ausschalten",
        (Lang::En, true) => "Turn autopilot on",
        (Lang::En, false) => "Turn autopilot off",
    }
}
