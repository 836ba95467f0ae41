#!/usr/bin/python3
"""Generates py_unicode_tables.inc: the character properties of CPython's
str and unicodedata that Hugging Face's slow SentencePiece tokenizers
(AlbertTokenizer) depend on, for py_unicode.cc.

Run with Debian's /usr/bin/python3 (3.11, Unicode 14.0), the interpreter the
tests' oracle runs with, from the repository root:

    /usr/bin/python3 model/tokenizer/gen_unicode_tables.py > model/tokenizer/py_unicode_tables.inc

    gen_unicode_tables.py --dump FILE   # instead: one JSON line per code point
                                        # with a non-trivial property (the
                                        # C++ parity test reads it)

Every table is derived from Python's own behaviour, code point by code point:
  space       chr(c).isspace()                 (what str.split()/strip() use)
  digit       chr(c).isdigit()
  combining   unicodedata.combining(chr(c)) != 0
  stripped    NFKD(chr(c)) without its combining characters, for c that is
              not combining itself; Hangul syllables are left to the
              algorithm in py_unicode.cc (checked here)
  lower       chr(c).lower() (no context)
  sigma       how c counts in str.lower()'s final-sigma context, probed
              through str.lower() itself: cased, case-ignorable or other
  regex class how the `regex` module (Debian's python3-regex, with its own
              Unicode tables) matches c against \p{L}, \p{N} and \s: the
              classes of the GPT-2 pre-tokenizer pattern that GPT-2, RoBERTa
              and DeBERTa v1 tokenizers run with that module
"""
import sys
import unicodedata

SIGMA, SMALL_SIGMA, FINAL_SIGMA = "\u03a3", "\u03c3", "\u03c2"
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3
KIND_OTHER, KIND_CASED, KIND_IGNORABLE = 0, 1, 2
# RegexClass in py_unicode.h.
REGEX_OTHER, REGEX_LETTER, REGEX_NUMBER, REGEX_SPACE = 0, 1, 2, 3


def code_points():
    for cp in range(0x110000):
        if not 0xD800 <= cp <= 0xDFFF:
            yield cp


def stripped_nfkd(ch):
    return "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))


def sigma_kind(ch):
    # CPython's handle_capital_sigma: Σ is final after a cased character
    # (case-ignorable ones skipped) and not before one.
    after_only = (ch + SIGMA).lower()[-1] == FINAL_SIGMA   # cased, not ignorable
    after_a = ("a" + ch + SIGMA).lower()[-1] == FINAL_SIGMA  # ignorable or cased
    kind = KIND_CASED if after_only else (KIND_IGNORABLE if after_a else KIND_OTHER)
    before = ("a" + SIGMA + ch).lower()[1] == FINAL_SIGMA
    assert before == (kind != KIND_CASED), hex(ord(ch))
    return kind


def hangul_stripped(cp):
    s = cp - HANGUL_FIRST
    out = [0x1100 + s // 588, 0x1161 + (s % 588) // 28]
    if s % 28:
        out.append(0x11A7 + s % 28)
    return "".join(map(chr, out))


def props(cp):
    ch = chr(cp)
    comb = unicodedata.combining(ch) != 0
    stripped = "" if comb else stripped_nfkd(ch)
    return {
        "space": ch.isspace(),
        "digit": ch.isdigit(),
        "combining": comb,
        "stripped": stripped,
        "lower": ch.lower(),
        "sigma": sigma_kind(ch),
    }


def regex_classes():
    """(version of the regex module, {cp: class} for every code point that is
    \\p{L}, \\p{N} or \\s); the three classes are disjoint."""
    import regex  # python3-regex; only this table needs it
    letter, number, space = regex.compile(r"\p{L}"), regex.compile(r"\p{N}"), regex.compile(r"\s")
    classes = {}
    for cp in code_points():
        ch = chr(cp)
        hits = [c for c, r in ((REGEX_LETTER, letter), (REGEX_NUMBER, number), (REGEX_SPACE, space))
                if r.match(ch)]
        assert len(hits) <= 1, hex(cp)
        if hits:
            classes[cp] = hits[0]
    return regex.__version__, classes


def class_ranges(classes):
    """[lo, hi, class] runs of consecutive code points of one class."""
    out = []
    for cp in sorted(classes):
        if out and out[-1][1] == cp - 1 and out[-1][2] == classes[cp]:
            out[-1][1] = cp
        else:
            out.append([cp, cp, classes[cp]])
    return out


def ranges(cps):
    out = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def delta_runs(mapping):
    """[lo, count, stride, delta]: lo + k*stride -> lo + k*stride + delta.
    A stride-2 run only skips code points that have no mapping, so runs never
    interleave and can be binary-searched by lo."""
    cps = sorted(mapping)
    index = {cp: i for i, cp in enumerate(cps)}
    runs, i = [], 0
    while i < len(cps):
        lo = cps[i]
        delta = mapping[lo] - lo
        stride = 1
        if lo + 1 not in mapping and mapping.get(lo + 2, None) == lo + 2 + delta:
            stride = 2
        count = 1
        while True:
            nxt = lo + count * stride
            if mapping.get(nxt, None) != nxt + delta:
                break
            if stride == 2 and nxt - 1 in mapping:
                break
            count += 1
        runs.append([lo, count, stride, delta])
        i = index[lo + (count - 1) * stride] + 1
    return runs


def emit_ranges(name, rs, out):
    emit_rows("constexpr CodepointRange %s[]" % name, rs, "{0x%X, 0x%X}", out)


def emit_rows(decl, rows, fmt, out):
    out.append(decl + " = {")
    line = " "
    for row in rows:
        item = " " + fmt % tuple(row) + ","
        if len(line) + len(item) > 98:
            out.append(line)
            line = " "
        line += item
    out.append(line)
    out.append("};")


def multi_table(mapping, prefix, out):
    """Mappings to several (or zero) code points: sorted {cp, offset, count}
    rows into one data array."""
    rows, data = [], []
    for cp in sorted(mapping):
        target = [ord(c) for c in mapping[cp]]
        rows.append([cp, len(data), len(target)])
        data.extend(target)
    assert len(data) < 65536
    emit_rows("constexpr MultiMapping k%sMulti[]" % prefix, rows, "{0x%X, %d, %d}", out)
    emit_rows("constexpr char32_t k%sData[]" % prefix, [[d] for d in data] or [[0]], "0x%X", out)


def generate():
    space, digit, comb, cased, ignorable = [], [], [], [], []
    lower_single, lower_multi, strip_single, strip_multi = {}, {}, {}, {}
    max_len = 1
    for cp in code_points():
        p = props(cp)
        ch = chr(cp)
        if p["space"]:
            space.append(cp)
        if p["digit"]:
            digit.append(cp)
        if p["combining"]:
            comb.append(cp)
        if p["sigma"] == KIND_CASED:
            cased.append(cp)
        elif p["sigma"] == KIND_IGNORABLE:
            ignorable.append(cp)
        if p["lower"] != ch:
            (lower_single if len(p["lower"]) == 1 else lower_multi)[cp] = p["lower"]
        max_len = max(max_len, len(p["lower"]), len(p["stripped"]))
        if HANGUL_FIRST <= cp <= HANGUL_LAST:
            assert p["stripped"] == hangul_stripped(cp), hex(cp)
            continue
        if not p["combining"] and p["stripped"] != ch:
            if len(p["stripped"]) == 1:
                strip_single[cp] = p["stripped"]
            else:
                strip_multi[cp] = p["stripped"]

    out = ["// Generated by model/tokenizer/gen_unicode_tables.py with Python %s"
           % sys.version.split()[0],
           "// (unicodedata %s). Do not edit; regenerate instead." % unicodedata.unidata_version,
           "// Included by py_unicode.cc only.", "",
           'constexpr char kUnidataVersion[] = "%s";' % unicodedata.unidata_version,
           "constexpr int kGeneratedMaxMapped = %d;" % max_len, ""]
    emit_ranges("kSpaceRanges", ranges(space), out)
    emit_ranges("kDigitRanges", ranges(digit), out)
    emit_ranges("kCombiningRanges", ranges(comb), out)
    emit_ranges("kCasedRanges", ranges(cased), out)
    emit_ranges("kCaseIgnorableRanges", ranges(ignorable), out)
    out.append("")
    out.append("// chr(c).lower() when it is one code point other than c.")
    emit_rows("constexpr DeltaRun kLowerRuns[]",
              delta_runs({cp: ord(t) for cp, t in lower_single.items()}),
              "{0x%X, %d, %d, %d}", out)
    out.append("// chr(c).lower() when it is several code points.")
    multi_table(lower_multi, "Lower", out)
    out.append("")
    out.append("// NFKD(c) without combining characters, when it is one code point other")
    out.append("// than c (c not combining, not a Hangul syllable).")
    emit_rows("constexpr DeltaRun kStrippedRuns[]",
              delta_runs({cp: ord(t) for cp, t in strip_single.items()}),
              "{0x%X, %d, %d, %d}", out)
    out.append("// The same when it is zero or several code points.")
    multi_table(strip_multi, "Stripped", out)
    out.append("")
    regex_version, classes = regex_classes()
    out.append("// The regex module %s: \\p{L} (1), \\p{N} (2) and \\s (3); other code points" % regex_version)
    out.append("// are none of them (0).")
    out.append('constexpr char kRegexModuleVersion[] = "%s";' % regex_version)
    emit_rows("constexpr ClassRange kRegexClassRanges[]", class_ranges(classes), "{0x%X, 0x%X, %d}", out)
    return "\n".join(out) + "\n"


def dump(path):
    import json
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"unidata_version": unicodedata.unidata_version}) + "\n")
        for cp in code_points():
            p = props(cp)
            ch = chr(cp)
            if (p["space"] or p["digit"] or p["combining"] or p["sigma"] != KIND_OTHER
                    or p["lower"] != ch or p["stripped"] != ch):
                f.write(json.dumps([cp, int(p["space"]), int(p["digit"]), int(p["combining"]),
                                    [ord(c) for c in p["stripped"]], [ord(c) for c in p["lower"]],
                                    p["sigma"]]) + "\n")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--dump":
        dump(sys.argv[2])
    elif len(sys.argv) == 1:
        sys.stdout.write(generate())
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
