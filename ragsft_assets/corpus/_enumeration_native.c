/* The enumeration rule of ragsft_assets/corpus/enumeration.py, in C.
 *
 * enumeration.py is the reference: this file computes the same answer for every (sentence, alias),
 * and test_corpus_native_enumeration.py compares the two on real sentences and on fuzzed ones. Each of
 * its regular expressions is written here as a small scanner with the semantics of Python's `re` on
 * str patterns: \s is Py_UNICODE_ISSPACE, \w is Py_UNICODE_ISALNUM or '_', \b looks at the character
 * before the search position (the real string's, as `re` does with pos=) and treats endpos as the
 * end, and re.IGNORECASE compares simple lowercase mappings, plus `re`'s two extra equivalences that
 * touch these patterns (i ~ U+0131 dotless i, s ~ U+017F long s). Strings that the Python code cuts
 * out (clause, item, separator) are ranges here, with their own edges for ^, $ and \b.
 *
 * Why C: the rule runs once per candidate edge of the link graph (90,000 edges per 100,000 articles)
 * and took ~13 us an edge in Python, most of it in the regex engine; here it is well under one.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

typedef Py_UCS4 ch;
typedef Py_ssize_t idx;

#define MAX_INNER_WORDS 4
#define WINDOW 160
#define MAX_DETERMINER 3 /* the longest of DETERMINERS, in characters */

/* ---- character classes ------------------------------------------------------------------------ */

/* ASCII first: the Unicode database lookups are function calls, and most characters are ASCII. */
static inline int is_space(ch c) { return Py_UNICODE_ISSPACE(c); }
static inline int is_alnum(ch c) {
    if (c < 128) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
    return Py_UNICODE_ISALNUM(c);
}
static inline int is_word(ch c) { return c == '_' || is_alnum(c); }

/* Whether text character c matches pattern character p under re.IGNORECASE. p is lowercase ASCII or
 * U+00E0 (the determiner "à"); ' ' and '\'' are tokens handled by the callers. */
static inline int ci_eq(ch c, ch p) {
    if (c == p) return 1;
    if (c < 128) return p < 128 && (c | 0x20) == p && p >= 'a' && p <= 'z';
    ch low = Py_UNICODE_TOLOWER(c);
    if (low == p) return 1;
    return (p == 'i' && low == 0x131) || (p == 's' && low == 0x17f);
}

/* ---- phrases ------------------------------------------------------------------------------------ */
/* A phrase is a zero-terminated UTF-32 string: letters match case-insensitively, ' ' is \s+ (greedy;
 * the next token is never a space, so greedy is the only way it can match) and '\'' is the class
 * ['’]. match_phrase returns where the phrase ends when it matches at s[p..end), else -1. */

static inline idx match_phrase(const ch *s, idx p, idx end, const ch *ph) {
    /* Every phrase starts with a letter: most calls end here, without a loop. */
    if (p >= end || !ci_eq(s[p], *ph)) return -1;
    for (p++, ph++; *ph; ph++) {
        if (*ph == ' ') {
            if (p >= end || !is_space(s[p])) return -1;
            while (p < end && is_space(s[p])) p++;
        } else if (*ph == '\'') {
            if (p >= end || (s[p] != '\'' && s[p] != 0x2019)) return -1;
            p++;
        } else {
            if (p >= end || !ci_eq(s[p], *ph)) return -1;
            p++;
        }
    }
    return p;
}

/* et|ou|and|or, the conjunctions every separator knows. */
static const ch *const CONJ_SHORT[] = {U"et", U"ou", U"and", U"or", NULL};
/* et|ou|and|or|ainsi\s+que|as\s+well\s+as */
static const ch *const CONJ_LONG[] = {U"et", U"ou", U"and", U"or", U"ainsi que", U"as well as", NULL};
/* \b(?:et|ou|and|or|que|as) of _SEP_BEFORE (no \b after) */
static const ch *const SEP_BEFORE_WORDS[] = {U"et", U"ou", U"and", U"or", U"que", U"as", NULL};
/* The words of _FAST_HINT. */
static const ch *const HINT_WORDS[] = {U"et", U"ou", U"and", U"or", U"que", U"comme", U"notamment",
                                       U"dont", U"such", U"including", U"like", NULL};
/* The word triggers of _TRIGGERS_SRC, optional parts expanded: tel(?:le)?s?\s+que, parmi\s+lesquel(?:le)?s. */
static const ch *const TRIGGER_WORDS[] = {
    U"tel que", U"tels que", U"telle que", U"telles que", U"comme", U"notamment", U"dont",
    U"parmi lesquels", U"parmi lesquelles", U"en particulier", U"such as", U"including", U"like",
    U"among them", U"among which", U"namely", NULL};
/* le|la|les|l['’]|un|une|des|du|de|d['’]|à|au|aux|en|the|a|an|of|in|at */
static const ch *const DETERMINERS[] = {U"le", U"la", U"les", U"l'", U"un", U"une", U"des", U"du", U"de",
                                        U"d'", U"\u00e0", U"au", U"aux", U"en", U"the", U"a", U"an",
                                        U"of", U"in", U"at", NULL};

/* \b at p, in a string whose edges are [lo, hi): characters outside it count as non-word. */
static inline int boundary(const ch *s, idx lo, idx hi, idx p) {
    int before = p > lo && is_word(s[p - 1]);
    int after = p < hi && is_word(s[p]);
    return before != after;
}

/* \b(?:words)\b somewhere in s[lo..hi) (a string of its own: its edges are the string's edges). */
static int has_bounded_word(const ch *s, idx lo, idx hi, const ch *const *words) {
    for (idx p = lo; p < hi; p++) {
        if (!is_word(s[p]) || (p > lo && is_word(s[p - 1]))) continue; /* \b before a word char */
        for (const ch *const *w = words; *w; w++) {
            idx q = match_phrase(s, p, hi, *w);
            if (q >= 0 && boundary(s, lo, hi, q)) return 1;
        }
    }
    return 0;
}

/* _FAST_HINT over a whole sentence (the "," and ":" alternatives first, as _has_hint does). */
static int has_hint(const ch *s, idx n) {
    for (idx i = 0; i < n; i++)
        if (s[i] == ',' || s[i] == ':') return 1;
    return has_bounded_word(s, 0, n, HINT_WORDS);
}

/* ---- (ws|determiner)* ---------------------------------------------------------------------------- */

/* dets[i - lo] = whether s[i..hi) is a sequence of whitespace characters and determiners, for i in
 * [lo, hi]; filled backwards. This is the language of `\s*(?:det\s*)*` (and of (det|ws)*). */
static void fill_dets(const ch *s, idx lo, idx hi, char *dets) {
    dets[hi - lo] = 1;
    int misses = 0;
    for (idx i = hi - 1; i >= lo; i--) {
        char ok = (char)(is_space(s[i]) && dets[i + 1 - lo]);
        for (const ch *const *d = DETERMINERS; !ok && *d; d++) {
            idx q = match_phrase(s, i, hi, *d);
            ok = (char)(q >= 0 && dets[q - lo]);
        }
        dets[i - lo] = ok;
        /* A true position needs a true one at most MAX_DETERMINER characters to its right: after that
         * many false ones in a row, every position further left is false too. */
        misses = ok ? 0 : misses + 1;
        if (misses == MAX_DETERMINER) {
            memset(dets, 0, (size_t)(i - lo));
            return;
        }
    }
}

/* Whether (?:det\s*)*$ matches at i in s[..hi): empty, or a determiner followed by (det|ws)*. `$` also
 * matches before a newline that ends the string, so a lone final "\n" counts as empty. */
static int det_run(const ch *s, idx i, idx hi, idx lo, const char *dets) {
    if (i == hi || (i == hi - 1 && s[i] == '\n')) return 1;
    /* dets[i] at a non-space can only come from a determiner starting at i (they start with a letter) */
    return !is_space(s[i]) && dets[i - lo];
}

/* ---- the rule -------------------------------------------------------------------------------------- */

typedef struct {
    char *dets;
    idx dets_size;
    idx *spans; /* item i is [spans[2i], spans[2i+1]); separator i is [seps[2i], seps[2i+1]) */
    idx *seps;
    idx items_size;
} Scratch;

static int scratch_fit(Scratch *w, idx n) {
    if (n + 1 > w->dets_size) {
        char *d = PyMem_Realloc(w->dets, (size_t)(n + 1));
        if (!d) return -1;
        w->dets = d;
        w->dets_size = n + 1;
    }
    /* A clause of m characters has at most m + 1 items (every separator takes at least one). */
    if (n + 2 > w->items_size) {
        idx *a = PyMem_Realloc(w->spans, sizeof(idx) * 2 * (size_t)(n + 2));
        if (!a) return -1;
        w->spans = a;
        idx *b = PyMem_Realloc(w->seps, sizeof(idx) * 2 * (size_t)(n + 2));
        if (!b) return -1;
        w->seps = b;
        w->items_size = n + 2;
    }
    return 0;
}

static void scratch_free(Scratch *w) {
    PyMem_Free(w->dets);
    PyMem_Free(w->spans);
    PyMem_Free(w->seps);
}

/* _SEP_AFTER.match(sentence, end): closers, then whitespace, then "," or \s(conj)\s. */
static int sep_after(const ch *s, idx n, idx end) {
    idx p = end;
    while (p < n && (s[p] == '"' || s[p] == '\'' || s[p] == 0xbb || s[p] == 0x201d || s[p] == 0x2019 ||
                     s[p] == ')' || s[p] == ']'))
        p++;
    idx w = p;
    while (w < n && is_space(s[w])) w++;
    if (w < n && s[w] == ',') return 1;
    if (w == p) return 0; /* \s(conj) needs a whitespace character before the word */
    for (const ch *const *c = CONJ_LONG; *c; c++) {
        idx q = match_phrase(s, w, n, *c);
        if (q >= 0 && q < n && is_space(s[q])) return 1;
    }
    return 0;
}

/* _SEP_BEFORE.search(sentence, lo, start): a trigger, a comma or a conjunction, then only whitespace
 * and determiners up to start (endpos). \b before a word sees the sentence's own previous character. */
static int sep_before(const ch *s, idx lo, idx start, char *dets) {
    fill_dets(s, lo, start, dets);
    for (idx p = lo; p < start; p++) {
        ch c = s[p];
        if ((c == ',' || c == ':') && dets[p + 1 - lo]) return 1;
        if (!is_word(c) || (p > 0 && is_word(s[p - 1]))) continue;
        for (const ch *const *t = TRIGGER_WORDS; *t; t++) {
            idx q = match_phrase(s, p, start, *t);
            if (q >= 0 && boundary(s, 0, start, q) && dets[q - lo]) return 1;
        }
        for (const ch *const *t = SEP_BEFORE_WORDS; *t; t++) {
            idx q = match_phrase(s, p, start, *t);
            if (q >= 0 && dets[q - lo]) return 1;
        }
    }
    return 0;
}

/* _SEPARATOR.finditer over the clause s[lo..hi): fills the item and separator ranges, returns the
 * number of items (separators are one fewer). */
static idx items(const ch *s, idx lo, idx hi, Scratch *w) {
    idx k = 0, prev = lo, p = lo;
    while (p < hi) {
        idx m_end = -1;
        if (s[p] == ',' || is_space(s[p])) { /* the lookahead (?=[\s,]) */
            idx i = p;
            while (i < hi && is_space(s[i])) i++;
            if (i < hi && s[i] == ',') { /* \s*,\s*(?:(?:et|ou|and|or)\s+)? */
                i++;
                while (i < hi && is_space(s[i])) i++;
                for (const ch *const *c = CONJ_SHORT; *c; c++) {
                    idx q = match_phrase(s, i, hi, *c);
                    if (q >= 0 && q < hi && is_space(s[q])) {
                        while (q < hi && is_space(s[q])) q++;
                        i = q;
                        break;
                    }
                }
                m_end = i;
            } else if (i > p) { /* \s+(?:et|ou|and|or|ainsi\s+que|as\s+well\s+as)\s+ */
                for (const ch *const *c = CONJ_LONG; *c; c++) {
                    idx q = match_phrase(s, i, hi, *c);
                    if (q >= 0 && q < hi && is_space(s[q])) {
                        while (q < hi && is_space(s[q])) q++;
                        m_end = q;
                        break;
                    }
                }
            }
        }
        if (m_end > p) {
            w->spans[2 * k] = prev;
            w->spans[2 * k + 1] = p;
            w->seps[2 * k] = p;
            w->seps[2 * k + 1] = m_end;
            k++;
            prev = p = m_end;
        } else {
            /* A failed whitespace run fails at each of its positions alike: go past it. */
            idx q = p + 1;
            while (q < hi && is_space(s[q])) q++;
            p = is_space(s[p]) ? q : p + 1;
        }
    }
    w->spans[2 * k] = prev;
    w->spans[2 * k + 1] = hi;
    return k + 1;
}

/* len(s[lo:hi].split()) */
static idx words(const ch *s, idx lo, idx hi) {
    idx n = 0;
    for (idx i = lo; i < hi; i++)
        if (!is_space(s[i]) && (i == lo || is_space(s[i - 1]))) n++;
    return n;
}

static int all_space(const ch *s, idx lo, idx hi) {
    for (idx i = lo; i < hi; i++)
        if (!is_space(s[i])) return 0;
    return 1;
}

/* _TRAILING.match(after) */
static int trailing(const ch *s, idx lo, idx hi) {
    for (idx i = lo; i < hi; i++) {
        ch c = s[i];
        if (!(is_space(c) || c == '.' || c == ',' || c == ';' || c == '!' || c == '?' || c == 0x2026 ||
              c == 0xbb || c == 0x201d || c == '"' || c == '\'' || c == ')' || c == ']'))
            return 0;
    }
    return 1;
}

/* _DETERMINERS_END.search(before) on before = s[lo..hi): the start of the leftmost match, or -1. */
static idx determiners_end(const ch *s, idx lo, idx hi, char *dets) {
    fill_dets(s, lo, hi, dets);
    if (det_run(s, lo, hi, lo, dets)) return lo; /* ^ */
    for (idx p = lo; p < hi; p++)
        if (is_space(s[p]) && det_run(s, p + 1, hi, lo, dets)) return p;
    return -1;
}

/* _TRIGGER_END.search(core) on core = s[lo..hi): a trigger, then only whitespace to the end. */
static int trigger_end(const ch *s, idx lo, idx hi) {
    idx e = hi;
    while (e > lo && is_space(s[e - 1])) e--;
    if (e == lo) return 0;
    if (s[e - 1] == ':') return 1;
    /* A trigger is one or two words of letters (\s+ between): one ending at e starts where the last
     * word run starts, or where the run before it (only whitespace between) starts. */
    idx starts[2];
    idx p = e;
    for (int w = 0; w < 2; w++) {
        while (p > lo && is_word(s[p - 1])) p--;
        starts[w] = p;
        while (p > lo && is_space(s[p - 1])) p--;
        if (p == starts[w] || p == lo || !is_word(s[p - 1])) {
            if (w == 0) starts[1] = -1;
            break;
        }
    }
    for (int w = 0; w < 2; w++) {
        if (starts[w] < 0 || starts[w] >= e) continue;
        for (const ch *const *t = TRIGGER_WORDS; *t; t++)
            if (match_phrase(s, starts[w], e, *t) == e) return 1; /* \b after: e ends core or a space follows */
    }
    return 0;
}

/* _TRIGGER_ANY.search(item) on item = s[lo..hi) */
static int trigger_any(const ch *s, idx lo, idx hi) {
    for (idx i = lo; i < hi; i++)
        if (s[i] == ':') return 1;
    return has_bounded_word(s, lo, hi, TRIGGER_WORDS);
}

static inline int is_barrier(ch c) { return c == ';' || c == ':' || c == '(' || c == ')' || c == '[' || c == ']'; }

/* occurrence_in_enumeration(sentence, start, end); -1 on a memory error. */
static int occurrence(const ch *s, idx n, idx start, idx end, Scratch *w) {
    if (scratch_fit(w, n) < 0) return -1;
    if (!(sep_after(s, n, end) || sep_before(s, start - 40 > 0 ? start - 40 : 0, start, w->dets))) return 0;
    idx lo = start - WINDOW > 0 ? start - WINDOW : 0;
    idx hi = end + WINDOW < n ? end + WINDOW : n;
    idx cs = 0;
    for (idx i = lo; i < start; i++)
        if (is_barrier(s[i])) cs = i + 1;
    if (cs < lo) cs = lo;
    idx ce = hi;
    for (idx i = end; i < hi; i++)
        if (is_barrier(s[i])) {
            ce = i;
            break;
        }
    int clause_trigger = cs > 0 && s[cs - 1] == ':';
    idx n_items = items(s, cs, ce, w);
    idx k = -1;
    for (idx i = 0; i < n_items; i++)
        if (w->spans[2 * i] <= start && end <= w->spans[2 * i + 1]) {
            k = i;
            break;
        }
    if (k < 0) return 0; /* the alias spans a separator */
    idx is = w->spans[2 * k], ie = w->spans[2 * k + 1];
    int at_end = trailing(s, end, ie);
    idx det = determiners_end(s, is, start, w->dets);
    idx core_end = det >= 0 ? det : start;
    int trigger = trigger_end(s, is, core_end);
    int at_start = trigger || all_space(s, is, core_end);
    if (!at_end && !at_start) return 0;
    if (at_start && all_space(s, is, start) && k == 0 && clause_trigger) trigger = 1;
    idx count = 1;
    int conj = 0;
    if (at_start) {
        for (idx j = k - 1; j >= 0; j--) {
            count++;
            conj = conj || has_bounded_word(s, w->seps[2 * j], w->seps[2 * j + 1], CONJ_LONG);
            idx ls = w->spans[2 * j], le = w->spans[2 * j + 1];
            if (trigger_any(s, ls, le) || (j == 0 && clause_trigger)) trigger = 1;
            if (words(s, ls, le) > MAX_INNER_WORDS) break;
        }
    }
    if (at_end) {
        for (idx j = k + 1; j < n_items; j++) {
            count++;
            conj = conj || has_bounded_word(s, w->seps[2 * (j - 1)], w->seps[2 * (j - 1) + 1], CONJ_LONG);
            if (words(s, w->spans[2 * j], w->spans[2 * j + 1]) > MAX_INNER_WORDS) break;
        }
    }
    return (count >= 3 && (conj || trigger)) || (count >= 2 && trigger);
}

/* The first a[0..alen) in s[from..n), or -1 (str.find). */
static idx find(const ch *s, idx n, const ch *a, idx alen, idx from) {
    if (alen == 0) return from <= n ? from : -1;
    for (idx i = from; i + alen <= n; i++)
        if (s[i] == a[0] && memcmp(s + i, a, sizeof(ch) * (size_t)alen) == 0) return i;
    return -1;
}

/* _alias_only(sentence, alias) on code points; -1 on a memory error. */
static int alias_only(const ch *s, idx n, const ch *a, idx alen, Scratch *w) {
    int found = 0;
    for (idx pos = find(s, n, a, alen, 0); pos >= 0; pos = find(s, n, a, alen, pos + 1)) {
        idx end = pos + alen;
        if ((pos == 0 || !is_alnum(s[pos - 1])) && (end == n || !is_alnum(s[end]))) {
            found = 1;
            int r = occurrence(s, n, pos, end, w);
            if (r <= 0) return r;
        }
    }
    return found;
}

/* ---- Python interface ------------------------------------------------------------------------------ */

typedef struct {
    ch *buf;
    idx size;
} Text;

/* The code points of a str in a reusable buffer; NULL with an exception set on failure. */
static const ch *text_of(PyObject *str, Text *t) {
    idx n = PyUnicode_GET_LENGTH(str);
    if (n + 1 > t->size) {
        ch *b = PyMem_Realloc(t->buf, sizeof(ch) * (size_t)(n + 1));
        if (!b) {
            PyErr_NoMemory();
            return NULL;
        }
        t->buf = b;
        t->size = n + 1;
    }
    return PyUnicode_AsUCS4(str, t->buf, t->size, 0);
}

static PyObject *py_alias_only(PyObject *self, PyObject *args) {
    PyObject *sentence, *alias;
    if (!PyArg_ParseTuple(args, "UU:alias_only_in_enumeration", &sentence, &alias)) return NULL;
    Text t = {0}, ta = {0};
    Scratch w = {0};
    int r = 0;
    const ch *s = text_of(sentence, &t), *a = s ? text_of(alias, &ta) : NULL;
    if (!a) r = -1;
    else if (PyUnicode_GET_LENGTH(alias) && has_hint(s, PyUnicode_GET_LENGTH(sentence)))
        r = alias_only(s, PyUnicode_GET_LENGTH(sentence), a, PyUnicode_GET_LENGTH(alias), &w);
    PyMem_Free(t.buf);
    PyMem_Free(ta.buf);
    scratch_free(&w);
    if (r < 0) return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    return PyBool_FromLong(r);
}

static PyObject *py_occurrence(PyObject *self, PyObject *args) {
    PyObject *sentence;
    idx start, end;
    if (!PyArg_ParseTuple(args, "Unn:occurrence_in_enumeration", &sentence, &start, &end)) return NULL;
    idx n = PyUnicode_GET_LENGTH(sentence);
    if (start < 0 || end < start || end > n) {
        PyErr_SetString(PyExc_ValueError, "need 0 <= start <= end <= len(sentence)");
        return NULL;
    }
    Text t = {0};
    Scratch w = {0};
    const ch *s = text_of(sentence, &t);
    int r = s ? occurrence(s, n, start, end, &w) : -1;
    PyMem_Free(t.buf);
    scratch_free(&w);
    if (r < 0) return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    return PyBool_FromLong(r);
}

static PyObject *py_flags(PyObject *self, PyObject *pairs) {
    PyObject *seq = PySequence_Fast(pairs, "enumeration_flags needs a sequence of (sentence, alias) pairs");
    if (!seq) return NULL;
    idx n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (!out) {
        Py_DECREF(seq);
        return NULL;
    }
    Text t = {0}, ta = {0};
    Scratch w = {0};
    PyObject *last = NULL; /* pairs of one sentence share its str: decode it and find its hint once */
    const ch *s = NULL;
    int hint = 0;
    for (idx i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0)) ||
            !PyUnicode_Check(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "enumeration_flags needs (str, str) tuples");
            goto fail;
        }
        PyObject *sentence = PyTuple_GET_ITEM(pair, 0), *alias = PyTuple_GET_ITEM(pair, 1);
        if (sentence != last) {
            s = text_of(sentence, &t);
            if (!s) goto fail;
            hint = has_hint(s, PyUnicode_GET_LENGTH(sentence));
            last = sentence;
        }
        int r = 0;
        if (hint && PyUnicode_GET_LENGTH(alias)) {
            const ch *a = text_of(alias, &ta);
            if (!a) goto fail;
            r = alias_only(s, PyUnicode_GET_LENGTH(sentence), a, PyUnicode_GET_LENGTH(alias), &w);
            if (r < 0) {
                PyErr_NoMemory();
                goto fail;
            }
        }
        PyObject *b = r ? Py_True : Py_False;
        Py_INCREF(b);
        PyList_SET_ITEM(out, i, b);
    }
    PyMem_Free(t.buf);
    PyMem_Free(ta.buf);
    scratch_free(&w);
    Py_DECREF(seq);
    return out;
fail:
    PyMem_Free(t.buf);
    PyMem_Free(ta.buf);
    scratch_free(&w);
    Py_DECREF(seq);
    Py_DECREF(out);
    return NULL;
}

/* UTF-8 p[0..len) into code points; the count, or -1 where it is not valid UTF-8 (overlong forms and
 * surrogates included), which Arrow strings made from Python str never are. */
static idx utf8_decode(const unsigned char *p, idx len, ch *out) {
    idx n = 0;
    for (idx i = 0; i < len;) {
        unsigned c = p[i];
        ch cp;
        int more;
        if (c < 0x80) {
            out[n++] = c;
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            cp = c & 0x1F, more = 1;
        } else if ((c & 0xF0) == 0xE0) {
            cp = c & 0x0F, more = 2;
        } else if ((c & 0xF8) == 0xF0) {
            cp = c & 0x07, more = 3;
        } else {
            return -1;
        }
        if (i + more >= len) return -1;
        for (int k = 1; k <= more; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return -1;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((more == 1 && cp < 0x80) || (more == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (more == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return -1;
        out[n++] = cp;
        i += more + 1;
    }
    return n;
}

/* One Arrow utf8 array (int32 offsets) as seen from C: value i is data[off[base + i]..off[base + i + 1]). */
typedef struct {
    Py_buffer offsets, data;
    idx base, length;
} Utf8;

static int utf8_value(const Utf8 *a, idx i, const unsigned char **p, idx *len) {
    if (i < 0 || i >= a->length) return -1;
    const int32_t *off = (const int32_t *)a->offsets.buf;
    int32_t lo = off[a->base + i], hi = off[a->base + i + 1];
    if (lo < 0 || hi < lo || (Py_ssize_t)hi > a->data.len) return -1;
    *p = (const unsigned char *)a->data.buf + lo;
    *len = hi - lo;
    return 0;
}

static int utf8_check(const Utf8 *a) {
    return a->base >= 0 && a->length >= 0 &&
           (Py_ssize_t)sizeof(int32_t) * (a->base + a->length + 1) <= a->offsets.len;
}

/* enumeration_flags_utf8(sentences, index, aliases, out): out[i] = the rule for
 * (sentences[index[i]], aliases[i]), where sentences and aliases are Arrow utf8 arrays given as
 * (offsets buffer, data buffer, array offset, length) and index an int32 buffer (one per pair). No
 * Python object is made per pair. ValueError on anything out of bounds or not UTF-8. */
static PyObject *py_flags_utf8(PyObject *self, PyObject *args) {
    Utf8 sent = {0}, alias = {0};
    Py_buffer index = {0}, out = {0};
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "(y*y*nn)y*(y*y*nn)w*:enumeration_flags_utf8", &sent.offsets, &sent.data,
                          &sent.base, &sent.length, &index, &alias.offsets, &alias.data, &alias.base,
                          &alias.length, &out))
        return NULL;
    Text t = {0}, ta = {0};
    Scratch w = {0};
    idx n = alias.length;
    if (!utf8_check(&sent) || !utf8_check(&alias) || index.len != (Py_ssize_t)sizeof(int32_t) * n ||
        out.len != n) {
        PyErr_SetString(PyExc_ValueError, "enumeration_flags_utf8: buffers do not match the lengths");
        goto done;
    }
    const int32_t *idx_of = (const int32_t *)index.buf;
    unsigned char *flags = (unsigned char *)out.buf;
    idx last = -1, slen = 0;
    int hint = 0;
    for (idx i = 0; i < n; i++) {
        const unsigned char *p;
        idx len;
        if (idx_of[i] != last) { /* pairs of one sentence come together: decode it and find its hint once */
            if (utf8_value(&sent, idx_of[i], &p, &len) < 0) goto bad;
            if (len + 1 > t.size) {
                ch *b = PyMem_Realloc(t.buf, sizeof(ch) * (size_t)(len + 1));
                if (!b) goto nomem;
                t.buf = b, t.size = len + 1;
            }
            if ((slen = utf8_decode(p, len, t.buf)) < 0) goto bad;
            hint = has_hint(t.buf, slen);
            last = idx_of[i];
        }
        int r = 0;
        if (utf8_value(&alias, i, &p, &len) < 0) goto bad;
        if (hint && len) {
            if (len + 1 > ta.size) {
                ch *b = PyMem_Realloc(ta.buf, sizeof(ch) * (size_t)(len + 1));
                if (!b) goto nomem;
                ta.buf = b, ta.size = len + 1;
            }
            idx alen = utf8_decode(p, len, ta.buf);
            if (alen < 0) goto bad;
            if ((r = alias_only(t.buf, slen, ta.buf, alen, &w)) < 0) goto nomem;
        }
        flags[i] = (unsigned char)r;
    }
    result = Py_None;
    Py_INCREF(result);
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "enumeration_flags_utf8: an index out of bounds or a value not UTF-8");
    goto done;
nomem:
    PyErr_NoMemory();
done:
    PyMem_Free(t.buf);
    PyMem_Free(ta.buf);
    scratch_free(&w);
    PyBuffer_Release(&sent.offsets);
    PyBuffer_Release(&sent.data);
    PyBuffer_Release(&alias.offsets);
    PyBuffer_Release(&alias.data);
    PyBuffer_Release(&index);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *py_has_hint(PyObject *self, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "has_hint needs a str");
        return NULL;
    }
    Text t = {0};
    const ch *s = text_of(arg, &t);
    int r = s ? has_hint(s, PyUnicode_GET_LENGTH(arg)) : -1;
    PyMem_Free(t.buf);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static PyMethodDef methods[] = {
    {"enumeration_flags", py_flags, METH_O,
     "enumeration_flags(pairs) -> list[bool]: alias_only_in_enumeration over (sentence, alias) str pairs."},
    {"enumeration_flags_utf8", py_flags_utf8, METH_VARARGS,
     "enumeration_flags_utf8((offsets, data, offset, length), index, (offsets, data, offset, length), out)"},
    {"alias_only_in_enumeration", py_alias_only, METH_VARARGS,
     "alias_only_in_enumeration(sentence, alias) -> bool"},
    {"occurrence_in_enumeration", py_occurrence, METH_VARARGS,
     "occurrence_in_enumeration(sentence, start, end) -> bool"},
    {"has_hint", py_has_hint, METH_O, "has_hint(sentence) -> bool: _FAST_HINT with its fast paths."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_enumeration_native",
    .m_doc = "The enumeration rule of ragsft_assets.corpus.enumeration, in C.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__enumeration_native(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
