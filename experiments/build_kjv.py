"""Rebuild examples/data/kjv.txt.gz, the King James Bible, from Debian's `bible-kjv` packages (how it was made).

    apt-get download bible-kjv-text bible-kjv        # 4.38: the compressed text and the `bible` reader
    dpkg -x bible-kjv-text_4.38_all.deb kjv && dpkg -x bible-kjv_4.38_amd64.deb kjv
    kjv/usr/bin/bible -p kjv/usr/lib -f gen1:1-rev22:21 > verses.txt   # 31102 lines "Ge1:1 In the beginning ..."
    python experiments/build_kjv.py verses.txt examples/data/kjv.txt.gz

The output: one document per chapter (1189), separated by blank lines, one verse per line, the verse references
dropped and the text otherwise unchanged. gzip with no file name or time in its header, so the same input gives the
same bytes.
"""

import gzip
import re
import sys
from pathlib import Path

REFERENCE = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")


def chapters(lines):
    """[(book, chapter, [verse, ...]), ...] in order, from the `bible -f` lines."""
    out, key = [], None
    for number, line in enumerate(lines, 1):
        match = REFERENCE.match(line.rstrip("\n"))
        if not match:
            raise ValueError(f"line {number}: not a 'BookC:V text' verse: {line[:60]!r}")
        book, chapter, _, text = match.groups()
        if (book, chapter) != key:
            key = (book, chapter)
            out.append((book, int(chapter), []))
        out[-1][2].append(text.strip())
    return out


def main(argv=None):
    source, target = (argv or sys.argv[1:])[:2]
    docs = chapters(Path(source).read_text().splitlines())
    text = "\n\n".join("\n".join(verses) for _, _, verses in docs) + "\n"
    with open(target, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(text.encode())
    print(f"{len(docs)} chapters, {sum(len(v) for *_, v in docs)} verses, {len(text.encode())} bytes -> {target}")


if __name__ == "__main__":
    main()
