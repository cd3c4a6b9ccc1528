#!/usr/bin/env python3
"""conf-man.py -- makes the man page o3m.conf(5) from docs/configuration.md.

    conf-man.py VERSION docs/configuration.md OUT.5

The page is made at build time (CMakeLists.txt) rather than kept beside the
Markdown, so that the two cannot differ. It understands the subset
docs/configuration.md uses: one "# title", "## section" headings,
paragraphs, and pipe tables whose first column is the key; inline `code`,
**bold** and *italic*. Each table row becomes a tagged paragraph: the key,
then the other columns as "header: value" lines, the last column (the
meaning) as the paragraph's text. Pandoc is not needed (Debian does not
install it with the build dependencies).
"""
import re
import sys


def inline(text):
    """Markdown inline markup to roff, with roff's special characters escaped."""
    text = text.replace("\\", "\\e")
    text = re.sub(r"`([^`]*)`", lambda m: "\\fB" + m.group(1).replace("-", "\\-") + "\\fR", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", text)
    text = re.sub(r"\*([^*]+)\*", r"\\fI\1\\fR", text)
    return text


def line_out(out, text):
    """One text line; a leading '.' or "'" would be read as a request."""
    if text[:1] in (".", "'"):
        text = "\\&" + text
    out.append(text)


def cells(row):
    return [c.strip() for c in row.strip().strip("|").split("|")]


def convert(version, lines):
    out = [
        '.TH O3M.CONF 5 "" "o3m %s" "O3M file formats"' % version,
        ".SH NAME",
        "o3m.conf \\- the federation config file of o3m",
        ".SH DESCRIPTION",
    ]
    para = []
    header = None

    def flush():
        if para:
            out.append(".PP")
            for p in para:
                line_out(out, inline(p))
            para.clear()

    for raw in lines:
        line = raw.rstrip("\n")
        if line.startswith("# "):
            continue
        if line.startswith("## "):
            flush()
            header = None
            out.append(".SH " + inline(line[3:]).upper().replace("\\FB", "\\fB").replace("\\FR", "\\fR"))
            continue
        if line.startswith("|"):
            flush()
            row = cells(line)
            if header is None:
                header = row
            elif all(re.fullmatch(r":?-+:?", c) for c in row):
                continue
            else:
                out.append(".TP")
                line_out(out, inline(row[0]))
                for name, value in zip(header[1:-1], row[1:-1]):
                    line_out(out, inline("%s: %s" % (name, value)))
                    out.append(".br")
                line_out(out, inline(row[-1]))
            continue
        header = None
        if not line.strip():
            flush()
            continue
        para.append(line.strip())
    flush()
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: conf-man.py VERSION docs/configuration.md OUT.5")
    with open(sys.argv[2], encoding="utf-8") as f:
        page = convert(sys.argv[1], f.readlines())
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        f.write(page)


if __name__ == "__main__":
    main()
