"""The King James Version as shipped by Debian (bible-kjv-text, read with bible-kjv's
`bible` program): verses split into a training set and a held-out set.

Held out: the last book, Revelation (404 verses); everything from Genesis to Jude trains.
Each verse is one line of plain text, without its number. The KJV is out of copyright
(see /usr/share/doc/bible-kjv-text/copyright).
"""

import re
import subprocess

HELD_OUT_BOOKS = ("Revelation",)

_CHAPTER = re.compile(r"^(\S.*) (\d+)$")
_VERSE = re.compile(r"^  (\d+) (.+)$")


def read_verses():
    """-> list of (book, chapter, verse, text) in canonical order."""
    raw = subprocess.run(["bible", "-l0", "gen1:1-rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    verses = []
    book, chapter = None, None
    for line in raw.splitlines():
        m = _CHAPTER.match(line)
        if m:
            book, chapter = m.group(1), int(m.group(2))
            continue
        m = _VERSE.match(line)
        if m:
            verses.append((book, chapter, int(m.group(1)), m.group(2).strip()))
        elif line.strip():
            raise ValueError(f"bible output: unexpected line {line!r}")
    if len(verses) != 31102:
        raise ValueError(f"bible output: {len(verses)} verses, expected 31102")
    return verses


def split_verses():
    """-> (train texts, held-out texts)."""
    verses = read_verses()
    train = [v[3] for v in verses if v[0] not in HELD_OUT_BOOKS]
    held = [v[3] for v in verses if v[0] in HELD_OUT_BOOKS]
    return train, held
