"""Chat turns drawn from the King James Version, for the bundled default model to learn the
chat template's turn format: a user message, then an assistant reply that is the passage
following it in the text and ends with </s>.

Every prompt is made of the corpus's own words, in four kinds:
  passage   the verse before the reply (whole, or its first clause)
  request   an imperative or question opener (words of the KJV) + a phrase of the reply
  words     a few consecutive words of the verse before the reply, with or without . ? !
  greeting  a short salutation made of KJV words
The reply is the next verse of the same chapter (two when the first is short), so it ends
at a verse boundary; the caller keeps only replies of a length it accepts.
"""

import re

# The chat template's role markers: user-defined pieces of the tokenizer (spm_train
# --user_defined_symbols), so a marker is always one token and never text.
USER, ASSISTANT = "<|user|>", "<|assistant|>"

OPENERS = ("Tell me of", "Tell me about", "Tell me", "Speak of", "Speak unto me of", "Shew me",
           "Declare", "Write of", "Write a song of", "Write", "Describe", "Sing of", "Teach me about",
           "What is", "What are", "What of", "Who is", "Where is", "Why", "How", "Give me",
           "What sayest thou of", "I ask thee of", "Say something of", "Let me hear of")
GREETINGS = ("Hail", "Peace be unto you", "Peace be with thee", "Greeting", "Good morning",
             "Blessed be thou", "How art thou", "Hear me", "Come", "Behold", "Well", "Thanks",
             "Welcome", "Lo")
ENDINGS = ("", ".", "?", "!")
_WORD = re.compile(r"[A-Za-z']+")


def render_prompt(message):
    """The chat template's rendering of one user message, after <s>, ready for the reply."""
    return f"{USER}{message}{ASSISTANT}"


def _phrase(words, rng, longest):
    n = int(rng.integers(1, min(longest, len(words)) + 1))
    lo = int(rng.integers(0, len(words) - n + 1))
    return " ".join(words[lo:lo + n])


def make_prompt(before, reply, rng):
    """One user message built from the verse before the reply and the reply itself."""
    kind = rng.choice(4, p=(0.25, 0.4, 0.25, 0.1))
    before_words = _WORD.findall(before)
    reply_words = [w for w in _WORD.findall(reply) if len(w) > 2] or _WORD.findall(reply)
    if kind == 0:
        text = before
        if rng.random() < 0.5:
            text = re.split(r"[:;,]", before)[0].rstrip() + str(rng.choice(ENDINGS[1:]))
    elif kind == 1:
        text = f"{rng.choice(OPENERS)} {_phrase(reply_words, rng, 3)}{rng.choice(ENDINGS)}"
    elif kind == 2:
        text = _phrase(before_words, rng, 6) + str(rng.choice(ENDINGS))
    else:
        text = str(rng.choice(GREETINGS)) + str(rng.choice(ENDINGS))
    if rng.random() < 0.1:
        text = text.lower()
    return text


def pairs(verses, rng, share, fits):
    """verses: (book, chapter, verse, text) in order -> [(prompt, reply)] for about `share`
    of the verses that have a following verse in the same chapter; fits(reply) decides
    which replies are kept."""
    out = []
    for i in range(len(verses) - 1):
        if rng.random() >= share:
            continue
        book, chapter, _, before = verses[i]
        nxt = verses[i + 1]
        if (nxt[0], nxt[1]) != (book, chapter):
            continue
        reply = nxt[3]
        if len(reply.split()) < 10 and i + 2 < len(verses) and verses[i + 2][:2] == (book, chapter):
            reply = f"{reply} {verses[i + 2][3]}"
        if not fits(reply):
            continue
        out.append((make_prompt(before, reply, rng), reply))
    return out
