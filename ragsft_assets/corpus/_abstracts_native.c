/* The hot steps of the abstracts stage, in C:
 *
 *   split_sentences  = ragsft_assets/corpus/sentences.py split_sentences (the _BOUNDARY regex,
 *                      _is_abbreviation, _ends_sentence_anyway, _single_spaced, the final
 *                      " ".join(s.split()) normalisation);
 *   locate_links     = ragsft_assets/corpus/abstracts.py _locate_links;
 *   abstract_links   = ragsft_assets/corpus/abstracts.py abstract_links (with _iter_links);
 *   (in locate_links) = abstracts._resolve_miss for the usual URL https://{host}/wiki/<raw> without '?'
 *                      (resolve_link's fast path, _title_from_path with unquote's percent-decoding,
 *                      ids.doc_id through hashlib.sha256, the bounded cache insert); other URLs still call it;
 *   rows_to_buffers  = the Arrow buffers of abstracts.rows_to_table (validity bitmaps, int32 offsets,
 *                      UTF-8, int64/int32 values), which abstracts.py wraps with Array.from_buffers:
 *                      no pa.array (value by value, and it imports pandas on its first call).
 *
 * The Python functions are the reference: these return exactly what they return, and
 * test_corpus_native_abstracts.py compares both on real and fuzzed input. Where an input is unusual
 * (a str or dict subclass, which may override the methods the Python code calls, a non-dict link...),
 * a function returns None before doing anything the Python one would not also do, and the caller
 * runs the Python one instead. Strings are read per code point (PyUnicode_READ), so every offset is
 * the one Python computes; the character classes are the ones of `re` on str patterns (\s is
 * Py_UNICODE_ISSPACE, \w is Py_UNICODE_ISALNUM or '_', \d is Py_UNICODE_ISDECIMAL) and of the str
 * methods (isalpha, isupper, isprintable, splitlines, strip, split).
 *
 * The test_corpus_native_rows.py tests compare the last two with the Python references.
 *
 * Why C: both ran ~8 us per input line in Python (the regex engine, many small str objects); the
 * abbreviation lists stay Python sets read from the JSON data files, passed in by the caller.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

typedef Py_UCS4 ch;
typedef Py_ssize_t idx;

typedef struct {
    int kind;
    const void *data;
} Text;

static inline ch at(Text t, idx i) { return PyUnicode_READ(t.kind, t.data, i); }

static inline Text text_of(PyObject *s) {
    Text t = {PyUnicode_KIND(s), PyUnicode_DATA(s)};
    return t;
}

/* ---- character classes ------------------------------------------------------------------------- */

static inline int is_space(ch c) { return Py_UNICODE_ISSPACE(c); }

/* What str.splitlines splits at (the list is checked over all of Unicode by the tests). */
static inline int is_linebreak(ch c) {
    if (c < 128) return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e);
    return c == 0x85 || c == 0x2028 || c == 0x2029;
}

static inline int is_printable(ch c) {
    if (c < 128) return c >= 0x20 && c < 0x7f;
    return Py_UNICODE_ISPRINTABLE(c);
}

static inline int is_alpha(ch c) {
    if (c < 128) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
    return Py_UNICODE_ISALPHA(c);
}

/* [^\W\d_]: \w but not \d nor '_' (letters, and digits that are not decimal such as U+00B2). */
static inline int is_word_letter(ch c) {
    if (c < 128) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
    return Py_UNICODE_ISALNUM(c) && !Py_UNICODE_ISDECIMAL(c);
}

/* [.!?…] */
static inline int is_terminal(ch c) { return c == '.' || c == '!' || c == '?' || c == 0x2026; }
/* [\"'»”’)\]] */
static inline int is_closer(ch c) {
    return c == '"' || c == '\'' || c == 0xbb || c == 0x201d || c == 0x2019 || c == ')' || c == ']';
}
/* [ \u00a0\u202f] */
static inline int is_guillemet_space(ch c) { return c == ' ' || c == 0xa0 || c == 0x202f; }
/* [\"«“(\[] */
static inline int is_opening(ch c) { return c == '"' || c == 0xab || c == 0x201c || c == '(' || c == '['; }
/* [A-ZÀ-ÖØ-ÞŒ0-9] (no re.IGNORECASE: a literal class) */
static inline int is_opener_char(ch c) {
    return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c >= 0xc0 && c <= 0xd6) ||
           (c >= 0xd8 && c <= 0xde) || c == 0x152;
}

/* Classes of the first 256 code points, filled at import from the same predicates: the scans over
 * whole texts test each character with one load (most characters of a French abstract are Latin-1). */
enum { C_TERMINAL = 1, C_LINEBREAK = 2, C_PRINTABLE = 4 };
static unsigned char latin1_class[256];

static void init_classes(void) {
    for (ch c = 0; c < 256; c++)
        latin1_class[c] = (is_terminal(c) ? C_TERMINAL : 0) | (is_linebreak(c) ? C_LINEBREAK : 0) |
                          (is_printable(c) ? C_PRINTABLE : 0);
}

static inline int has_class(ch c, int cls) {
    if (c < 256) return latin1_class[c] & cls;
    switch (cls) {
    case C_TERMINAL: return c == 0x2026;
    case C_LINEBREAK: return c == 0x2028 || c == 0x2029;
    default: return Py_UNICODE_ISPRINTABLE(c);
    }
}

/* The first i in [from, to) where TEST (on ch c) holds, else to; one loop per string kind so that each
 * reads its array directly. */
#define SCAN_KIND(T, from, to, TEST)                                                                 \
    do {                                                                                               \
        const T *d_ = (const T *)t.data;                                                               \
        for (idx i_ = (from); i_ < (to); i_++) {                                                       \
            ch c = d_[i_];                                                                             \
            if (TEST) return i_;                                                                       \
        }                                                                                              \
        return (to);                                                                                   \
    } while (0)
#define SCAN(from, to, TEST)                                                                           \
    switch (t.kind) {                                                                                  \
    case PyUnicode_1BYTE_KIND: SCAN_KIND(Py_UCS1, from, to, TEST);                                     \
    case PyUnicode_2BYTE_KIND: SCAN_KIND(Py_UCS2, from, to, TEST);                                     \
    default: SCAN_KIND(Py_UCS4, from, to, TEST);                                                       \
    }

static idx find_terminal(Text t, idx from, idx to) { SCAN(from, to, has_class(c, C_TERMINAL)) }
static idx find_linebreak(Text t, idx from, idx to) { SCAN(from, to, has_class(c, C_LINEBREAK)) }
/* The first non-printable character or second space of a double space, else `to`: `to` is
 * _single_spaced(text), text.isprintable() and "  " not in text. */
static idx find_odd(Text t, idx from, idx to) {
    SCAN(from, to, !has_class(c, C_PRINTABLE) || (c == ' ' && i_ > 0 && d_[i_ - 1] == ' '))
}

static inline int str_equal(PyObject *a, PyObject *b) {
    /* Exact str objects are canonical (narrowest kind), so equal ones have the same kind and bytes. */
    if (a == b) return 1;
    idx n = PyUnicode_GET_LENGTH(a);
    if (n != PyUnicode_GET_LENGTH(b) || PyUnicode_KIND(a) != PyUnicode_KIND(b)) return 0;
    return memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * PyUnicode_KIND(a)) == 0;
}

/* ---- interned names ---------------------------------------------------------------------------- */

static PyObject *s_lower, *s_upper, *s_url, *s_text, *s_sections, *s_name, *s_has_parts, *s_links;
static PyObject *counter_type; /* collections.Counter */

/* ---- word lists -------------------------------------------------------------------------------- */

/* The longest str in a frozenset (a word longer than that is not in it, and neither is its lowercase,
 * which is never shorter). Kept per frozenset, with a reference so the address stays that set's. */
#define MAXLEN_SLOTS 16
static struct {
    PyObject *set;
    idx maxlen;
} maxlen_cache[MAXLEN_SLOTS];
static int maxlen_next;

static idx set_maxlen(PyObject *set) {
    if (!PyFrozenSet_CheckExact(set)) return PY_SSIZE_T_MAX; /* mutable: no bound to keep */
    for (int i = 0; i < MAXLEN_SLOTS; i++)
        if (maxlen_cache[i].set == set) return maxlen_cache[i].maxlen;
    idx maxlen = 0;
    PyObject *it = PyObject_GetIter(set), *key;
    if (it == NULL) return -1;
    while ((key = PyIter_Next(it)) != NULL) {
        if (!PyUnicode_CheckExact(key)) maxlen = PY_SSIZE_T_MAX; /* may equal a str without being one */
        else if (PyUnicode_GET_LENGTH(key) > maxlen) maxlen = PyUnicode_GET_LENGTH(key);
        Py_DECREF(key);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return -1;
    int slot = maxlen_next;
    maxlen_next = (maxlen_next + 1) % MAXLEN_SLOTS;
    Py_XDECREF(maxlen_cache[slot].set);
    Py_INCREF(set);
    maxlen_cache[slot].set = set;
    maxlen_cache[slot].maxlen = maxlen;
    return maxlen;
}

/* word.lower() (a new reference), or Py_None (borrowed) when it equals word. */
static PyObject *lowered(PyObject *word) {
    idx n = PyUnicode_GET_LENGTH(word);
    if (PyUnicode_IS_ASCII(word)) {
        const Py_UCS1 *src = PyUnicode_1BYTE_DATA(word);
        idx i = 0;
        while (i < n && !(src[i] >= 'A' && src[i] <= 'Z')) i++;
        if (i == n) return Py_None;
        PyObject *low = PyUnicode_New(n, 127);
        if (low == NULL) return NULL;
        Py_UCS1 *dst = PyUnicode_1BYTE_DATA(low);
        for (i = 0; i < n; i++) dst[i] = (src[i] >= 'A' && src[i] <= 'Z') ? src[i] + 32 : src[i];
        return low;
    }
    /* Full case mapping (U+0130 becomes two characters, final sigma depends on context): str.lower. */
    return PyObject_CallMethodNoArgs(word, s_lower);
}

/* `word in words or word.lower() in words` (only the first with !with_lower), word = str[a:b]. */
static int contains(PyObject *words, PyObject *str, idx a, idx b, int with_lower) {
    idx maxlen = set_maxlen(words);
    if (maxlen < 0) return -1;
    if (b - a > maxlen) return 0;
    PyObject *word = PyUnicode_Substring(str, a, b);
    if (word == NULL) return -1;
    int r = PySet_Contains(words, word);
    if (r != 0 || !with_lower) {
        Py_DECREF(word);
        return r;
    }
    PyObject *low = lowered(word);
    Py_DECREF(word);
    if (low == NULL) return -1;
    if (low == Py_None) return 0;
    r = PySet_Contains(words, low);
    Py_DECREF(low);
    return r;
}

/* ---- split_sentences --------------------------------------------------------------------------- */

typedef struct {
    PyObject *str; /* the text */
    Text t;
    idx bs, be;    /* the stripped block being split: str[bs:be] is `block` of the Python code */
    PyObject *all, *capital, *before_opener, *openers;
} Block;

static idx rfind_char(Text t, idx lo, idx hi, ch c) {
    for (idx i = hi - 1; i >= lo; i--)
        if (at(t, i) == c) return i;
    return -1;
}

/* Start of _last_word(block, end): after the last space, then after the last ' ’ ( in turn. */
static idx cut_word(Text t, idx a, idx end) {
    static const ch seps[3] = {'\'', 0x2019, '('};
    for (int k = 0; k < 3; k++) {
        idx j = rfind_char(t, a, end, seps[k]);
        if (j >= 0) a = j + 1;
    }
    return a;
}

static idx after_last_space(const Block *b, idx end) {
    idx sp = rfind_char(b->t, b->bs, end, ' ');
    return sp < 0 ? b->bs : sp + 1;
}

/* _is_abbreviation(block, end, abbreviations) */
static int is_abbreviation(const Block *b, idx end) {
    Text t = b->t;
    idx a = after_last_space(b, end);
    int alpha = a < end;
    for (idx i = a; i < end && alpha; i++) alpha = is_alpha(at(t, i));
    if (alpha) return end - a == 1 ? 1 : contains(b->all, b->str, a, end, 1);
    a = cut_word(t, a, end);
    if (a == end) return 0;
    if (end - a == 1 && is_alpha(at(t, a))) return 1; /* an initial */
    int r = contains(b->all, b->str, a, end, 1);
    if (r != 0) return r;
    /* Dotted initials: parts between '.' and '-', more than one, each of one or two letters. */
    int dotted = 0;
    for (idx i = a; i < end && !dotted; i++) dotted = at(t, i) == '.' || at(t, i) == '-';
    if (!dotted) return 0;
    int parts = 0;
    idx i = a;
    while (i < end) {
        idx j = i;
        while (j < end && at(t, j) != '.' && at(t, j) != '-') j++;
        if (j > i) {
            parts++;
            if (j - i > 2) return 0;
            for (idx k = i; k < j; k++)
                if (!is_alpha(at(t, k))) return 0;
        }
        i = j + 1;
    }
    return parts > 1;
}

/* _ends_sentence_anyway(block, end, after, rules) */
static int ends_sentence_anyway(const Block *b, idx end, idx after) {
    Text t = b->t;
    idx be = b->be;
    /* _NEXT_WORD.match(block, after): [\"«“(\[]?\s*([^\W\d_]+). Backtracking never helps: a shorter
     * \s* leaves a space where a letter must be, and without the optional opening quote the quote
     * itself would have to be a letter. */
    idx j = after;
    if (j < be && is_opening(at(t, j))) j++;
    while (j < be && is_space(at(t, j))) j++;
    if (j >= be || !is_word_letter(at(t, j))) return 0;
    idx g = j;
    while (j < be && is_word_letter(at(t, j))) j++;
    if (!Py_UNICODE_ISUPPER(at(t, g))) return 0; /* a digit or lowercase follows: "art. 5" */
    idx a = cut_word(t, after_last_space(b, end), end);
    int r = contains(b->capital, b->str, a, end, 1);
    if (r != 0) return r;
    r = contains(b->before_opener, b->str, a, end, 1);
    if (r <= 0) return r;
    return contains(b->openers, b->str, g, j, 0);
}

/* str[a:b] with its whitespace normalised, " ".join(s.split()) (a new reference, "" when it is all
 * whitespace); as it is when the text is single-spaced (then every piece is already normalised). */
static PyObject *normalised_range(PyObject *str, Text t, idx a, idx b, int single_spaced) {
    int odd = 0;
    if (!single_spaced) {
        for (idx i = a; i < b && !odd; i++) {
            ch c = at(t, i);
            odd = is_space(c) && (c != ' ' || i == a || i == b - 1 || is_space(at(t, i + 1)));
        }
    }
    if (!odd) return PyUnicode_Substring(str, a, b);
    char stack[512];
    size_t size = (size_t)(b - a) * (size_t)t.kind;
    void *buf = size <= sizeof stack ? (void *)stack : PyMem_Malloc(size);
    if (buf == NULL) return PyErr_NoMemory();
    idx n = 0;
    int gap = 0;
    for (idx i = a; i < b; i++) {
        ch c = at(t, i);
        if (is_space(c)) {
            gap = n > 0;
            continue;
        }
        if (gap) PyUnicode_WRITE(t.kind, buf, n++, ' ');
        gap = 0;
        PyUnicode_WRITE(t.kind, buf, n++, c);
    }
    PyObject *out = PyUnicode_FromKindAndData(t.kind, buf, n); /* in the narrowest kind */
    if (buf != stack) PyMem_Free(buf);
    return out;
}

/* Appends the sentence str[a:b] to out, normalised, unless it is all whitespace (`if not s.isspace()`). */
static int append_piece(PyObject *out, PyObject *str, Text t, idx a, idx b, int single_spaced) {
    PyObject *piece = normalised_range(str, t, a, b, single_spaced);
    if (piece == NULL) return -1;
    int r = PyUnicode_GET_LENGTH(piece) == 0 && b > a ? 0 : PyList_Append(out, piece);
    Py_DECREF(piece);
    return r;
}

/* The sentences of one stripped block (the loop over _BOUNDARY.finditer(block)). */
static int split_block(const Block *b, PyObject *out, int single_spaced) {
    Text t = b->t;
    idx be = b->be, start = b->bs, i = b->bs;
    while ((i = find_terminal(t, i, be)) < be) {
        /* ([.!?…]+)(?:[\"'»”’)\]]|[ \u00a0\u202f]»)*(\s+)(?=[\"«“(\[]?\s*[A-ZÀ-ÖØ-ÞŒ0-9]) at i. Every
         * part is greedy and no backtracking can succeed where the greedy match fails: a shorter
         * punctuation run or closer run leaves a character that \s+ cannot take (or a » that the
         * opener cannot start with), and a shorter \s+ leaves a space that the lookahead's \s*
         * takes back. A failed match fails from every later position of the same punctuation run. */
        idx p = i, e1 = i;
        while (e1 < be && is_terminal(at(t, e1))) e1++;
        idx e2 = e1;
        for (;;) {
            if (e2 < be && is_closer(at(t, e2)))
                e2++;
            else if (e2 + 1 < be && is_guillemet_space(at(t, e2)) && at(t, e2 + 1) == 0xbb)
                e2 += 2;
            else
                break;
        }
        idx e3 = e2;
        while (e3 < be && is_space(at(t, e3))) e3++;
        int opener = 0;
        if (e3 > e2 && e3 < be) {
            ch c = at(t, e3);
            if (is_opener_char(c)) {
                opener = 1;
            } else if (is_opening(c)) {
                idx k = e3 + 1;
                while (k < be && is_space(at(t, k))) k++;
                opener = k < be && is_opener_char(at(t, k));
            }
        }
        if (!opener) {
            i = e1;
            continue;
        }
        i = e3;
        if (e1 - p == 1 && at(t, p) == '.') {
            int r = is_abbreviation(b, p);
            if (r > 0) {
                int ends = ends_sentence_anyway(b, p, e3);
                r = ends < 0 ? -1 : !ends;
            }
            if (r < 0) return -1;
            if (r) continue; /* an abbreviation's period: no boundary */
        }
        if (append_piece(out, b->str, t, start, e2, single_spaced) < 0) return -1;
        start = e3;
    }
    for (idx k = start; k < be; k++) /* `if tail.strip()` */
        if (!is_space(at(t, k))) return append_piece(out, b->str, t, start, be, single_spaced);
    return 0;
}

/* Whether all are exact sets or frozensets (a subclass may override __contains__, which PySet_Contains
 * would not call; a list is searched by ==). */
static int plain_sets(PyObject *const *sets, int n) {
    for (int i = 0; i < n; i++)
        if (!PyFrozenSet_CheckExact(sets[i]) && !PySet_CheckExact(sets[i])) return 0;
    return 1;
}

PyDoc_STRVAR(split_sentences_doc,
             "split_sentences(text, abbreviations, before_capital, before_opener, openers)\n--\n\n"
             "sentences.split_sentences(text, lang) with the language's word lists (the rules' all,\n"
             "ends_sentence_before_capital, ends_sentence_before_opener, sentence_openers); None when\n"
             "text is not an exact str or a word list not an exact set or frozenset (the caller runs\n"
             "the Python function).");

static PyObject *split_sentences(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "split_sentences takes 5 arguments");
        return NULL;
    }
    PyObject *str = args[0];
    if (!PyUnicode_CheckExact(str) || !plain_sets(args + 1, 4)) Py_RETURN_NONE;
    if (PyUnicode_READY(str) < 0) return NULL; /* a legacy string of the deprecated C API */
    Block b = {str, text_of(str), 0, 0, args[1], args[2], args[3], args[4]};
    Text t = b.t;
    idx n = PyUnicode_GET_LENGTH(str);
    idx odd = find_odd(t, 0, n);
    int single = odd == n; /* _single_spaced(text) */
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    idx pos = 0;
    /* The blocks of str.splitlines(), stripped; \r\n gives an empty block between, skipped as empty. */
    while (pos < n) {
        /* Line breaks are not printable: none before the first odd character (none at all in the usual
         * single-spaced text, whose one block is then found without a scan). */
        idx end = find_linebreak(t, pos > odd ? pos : odd, n);
        b.bs = pos;
        b.be = end;
        while (b.bs < b.be && is_space(at(t, b.bs))) b.bs++;
        while (b.be > b.bs && is_space(at(t, b.be - 1))) b.be--;
        if (b.bs < b.be && split_block(&b, out, single) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        pos = end + 1;
    }
    return out;
}

/* ---- UTF-8 and ids.doc_id ------------------------------------------------------------------ */

/* Most bytes the UTF-8 of an exact str can take. */
static inline idx utf8_bound(PyObject *s) {
    idx n = PyUnicode_GET_LENGTH(s);
    if (PyUnicode_IS_ASCII(s)) return n;
    return n * (PyUnicode_KIND(s) == PyUnicode_1BYTE_KIND ? 2 : PyUnicode_KIND(s) == PyUnicode_2BYTE_KIND ? 3 : 4);
}

/* s.encode("utf-8") into dst (utf8_bound(s) bytes at least): the length, or -1 where s holds a
 * surrogate (the strict codec raises there: the caller leaves it to Python). */
static idx utf8_encode(PyObject *s, unsigned char *dst) {
    idx n = PyUnicode_GET_LENGTH(s);
    if (PyUnicode_IS_ASCII(s)) {
        memcpy(dst, PyUnicode_DATA(s), (size_t)n);
        return n;
    }
    unsigned char *p = dst;
    if (PyUnicode_KIND(s) == PyUnicode_1BYTE_KIND) { /* Latin-1: most French text */
        const Py_UCS1 *d = PyUnicode_1BYTE_DATA(s);
        for (idx i = 0; i < n; i++) {
            Py_UCS1 c = d[i];
            if (c < 0x80) {
                *p++ = c;
            } else {
                *p++ = (unsigned char)(0xc0 | (c >> 6));
                *p++ = (unsigned char)(0x80 | (c & 0x3f));
            }
        }
        return p - dst;
    }
    Text t = text_of(s);
    for (idx i = 0; i < n; i++) {
        ch c = at(t, i);
        if (c < 0x80) {
            *p++ = (unsigned char)c;
        } else if (c < 0x800) {
            *p++ = (unsigned char)(0xc0 | (c >> 6));
            *p++ = (unsigned char)(0x80 | (c & 0x3f));
        } else if (c < 0x10000) {
            if (c >= 0xd800 && c <= 0xdfff) return -1;
            *p++ = (unsigned char)(0xe0 | (c >> 12));
            *p++ = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
            *p++ = (unsigned char)(0x80 | (c & 0x3f));
        } else {
            *p++ = (unsigned char)(0xf0 | (c >> 18));
            *p++ = (unsigned char)(0x80 | ((c >> 12) & 0x3f));
            *p++ = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
            *p++ = (unsigned char)(0x80 | (c & 0x3f));
        }
    }
    return p - dst;
}

/* hashlib.sha256, looked up at import: the digest comes from Python's own (OpenSSL) implementation. */
static PyObject *sha256_new = NULL;

#define ID_LEN 24 /* ids.ID_LEN: hex characters of the digest kept */

/* ids.doc_id(title): the first 24 hex characters of the SHA-256 of the title's UTF-8 (a new reference),
 * or NULL without an exception set where the title holds a surrogate (doc_id raises: Python decides). */
static PyObject *doc_id_of(PyObject *title) {
    unsigned char stack[1024];
    idx bound = utf8_bound(title);
    unsigned char *buf = bound <= (idx)sizeof stack ? stack : PyMem_Malloc((size_t)bound);
    if (buf == NULL) return PyErr_NoMemory();
    idx n = utf8_encode(title, buf);
    PyObject *hash = NULL, *bytes = NULL;
    if (n >= 0 && (bytes = PyBytes_FromStringAndSize((const char *)buf, n)) != NULL) {
        hash = PyObject_CallOneArg(sha256_new, bytes);
        Py_DECREF(bytes);
    }
    if (buf != stack) PyMem_Free(buf);
    if (n < 0 || hash == NULL) return NULL;
    PyObject *raw = PyObject_CallMethod(hash, "digest", NULL);
    Py_DECREF(hash);
    if (raw == NULL) return NULL;
    if (!PyBytes_Check(raw) || PyBytes_GET_SIZE(raw) < ID_LEN / 2) {
        Py_DECREF(raw);
        PyErr_SetString(PyExc_ValueError, "hashlib.sha256 gave an unexpected digest");
        return NULL;
    }
    const unsigned char *digest = (const unsigned char *)PyBytes_AS_STRING(raw);
    PyObject *out = PyUnicode_New(ID_LEN, 127);
    if (out == NULL) {
        Py_DECREF(raw);
        return NULL;
    }
    Py_UCS1 *hex = PyUnicode_1BYTE_DATA(out);
    for (int i = 0; i < ID_LEN / 2; i++) {
        hex[2 * i] = "0123456789abcdef"[digest[i] >> 4];
        hex[2 * i + 1] = "0123456789abcdef"[digest[i] & 15];
    }
    Py_DECREF(raw);
    return out;
}

PyDoc_STRVAR(doc_id_doc, "doc_id(title)\n--\n\n"
                         "ids.doc_id(title) for an exact str; None where Python decides (not an exact str,\n"
                         "a surrogate). For the tests.");

static PyObject *doc_id_py(PyObject *self, PyObject *title) {
    if (!PyUnicode_CheckExact(title)) Py_RETURN_NONE;
    PyObject *out = doc_id_of(title);
    if (out == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return out;
}

/* ---- the link cache's miss (abstracts._resolve_miss), for the usual URL ------------------------ */

/* What the fast path needs, from locate_links' arguments. */
typedef struct {
    PyObject *namespaces;            /* NON_ARTICLE_NAMESPACES (an exact set or frozenset), or NULL */
    idx cache_max;                   /* _CACHE_MAX */
    PyObject *kept, *non_article, *external; /* LINK_KEPT, LINK_NON_ARTICLE, LINK_EXTERNAL */
} Resolver;

static inline int hex_value(ch c) {
    if (c >= '0' && c <= '9') return (int)(c - '0');
    if (c >= 'a' && c <= 'f') return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return (int)(c - 'A' + 10);
    return -1;
}

/* urllib.parse.unquote(url[a:b]) (UTF-8, errors="replace") into out (b - a code points at most: each
 * input character gives at most one): the count, -1 on error. unquote decodes each run of ASCII
 * characters on its own (unquote_to_bytes, then bytes.decode): '%' and two hex digits is a byte, any
 * other '%' stays; the bytes are decoded by CPython's own UTF-8 decoder. */
static idx unquote_into(Text t, idx a, idx b, ch *out) {
    idx n = 0;
    unsigned char stack[256];
    unsigned char *bytes = b - a <= (idx)sizeof stack ? stack : PyMem_Malloc((size_t)(b - a));
    if (bytes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    idx i = a;
    while (i < b) {
        ch c = at(t, i);
        if (c >= 128) {
            out[n++] = c;
            i++;
            continue;
        }
        idx len = 0;
        int high = 0;
        for (; i < b && (c = at(t, i)) < 128; i++) {
            int hi, lo;
            if (c == '%' && i + 2 < b && (hi = hex_value(at(t, i + 1))) >= 0 &&
                (lo = hex_value(at(t, i + 2))) >= 0) {
                bytes[len] = (unsigned char)(hi << 4 | lo);
                high |= bytes[len++] >= 128;
                i += 2;
            } else {
                bytes[len++] = (unsigned char)c;
            }
        }
        if (!high) {
            for (idx k = 0; k < len; k++) out[n++] = bytes[k];
            continue;
        }
        PyObject *run = PyUnicode_DecodeUTF8((const char *)bytes, len, "replace");
        if (run == NULL) {
            n = -1;
            break;
        }
        Text r = text_of(run);
        for (idx k = 0; k < PyUnicode_GET_LENGTH(run); k++) out[n++] = at(r, k);
        Py_DECREF(run);
    }
    if (bytes != stack) PyMem_Free(bytes);
    return n;
}

/* title.split(":", 1)[0].strip().lower() in namespaces, for title = buf[0:n] holding a ':' at colon:
 * 1, 0, or -1 on error. str.lower is the full case mapping: called on a non-ASCII prefix. */
static int in_namespaces(const ch *buf, idx colon, PyObject *namespaces) {
    idx a = 0, b = colon;
    while (a < b && is_space(buf[a])) a++;
    while (b > a && is_space(buf[b - 1])) b--;
    idx maxlen = set_maxlen(namespaces); /* the lowercase is never shorter */
    if (maxlen < 0) return -1;
    if (b - a > maxlen) return 0;
    PyObject *prefix = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buf + a, b - a);
    if (prefix == NULL) return -1;
    PyObject *low = lowered(prefix);
    if (low == NULL) {
        Py_DECREF(prefix);
        return -1;
    }
    int r = PySet_Contains(namespaces, low == Py_None ? prefix : low);
    if (low != Py_None) Py_DECREF(low);
    Py_DECREF(prefix);
    return r;
}

/* title[0].upper() + title[1:] of title = buf[0:n], n > 0 (a new reference). str.upper is the full
 * case mapping ('ß' gives 'SS'): below U+0100 it is the simple one but for 'ß' (the tests check every
 * code point), above that str.upper decides. */
static PyObject *capitalised(ch *buf, idx n) {
    ch c = buf[0];
    if (c < 0x100 && c != 0xdf) {
        buf[0] = c < 0x80 ? (c >= 'a' && c <= 'z' ? c - 32 : c) : Py_UNICODE_TOUPPER(c);
        return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buf, n);
    }
    PyObject *first = PyUnicode_FromOrdinal((int)c);
    if (first == NULL) return NULL;
    PyObject *upper = PyObject_CallMethodNoArgs(first, s_upper);
    Py_DECREF(first);
    if (upper == NULL) return NULL;
    PyObject *rest = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buf + 1, n - 1);
    PyObject *out = rest == NULL ? NULL : PyUnicode_Concat(upper, rest);
    Py_DECREF(upper);
    Py_XDECREF(rest);
    return out;
}

/* _resolve_miss(url, host) where resolve_link takes its fast path, an absolute URL of the host's wiki
 * (https://{host}/wiki/<raw>, no '?'): _title_from_path(raw before any '#') and doc_id, the hit stored
 * in cache as _resolve_miss stores it (cleared first when it holds cache_max entries). Returns the hit
 * (a new reference), or NULL without an exception where Python decides (another URL, a title that
 * doc_id cannot encode). url and host are exact str. */
static PyObject *resolve_fast(PyObject *url, PyObject *host, PyObject *cache, const Resolver *rv) {
    static const char scheme[] = "https://", wiki[] = "/wiki/";
    if (PyUnicode_READY(url) < 0 || PyUnicode_READY(host) < 0) return NULL;
    idx hn = PyUnicode_GET_LENGTH(host), un = PyUnicode_GET_LENGTH(url), start = 8 + hn + 6;
    if (rv->namespaces == NULL || hn == 0 || un < start) return NULL;
    Text u = text_of(url), h = text_of(host);
    for (idx i = 0; i < 8; i++)
        if (at(u, i) != (ch)scheme[i]) return NULL;
    for (idx i = 0; i < hn; i++)
        if (at(u, 8 + i) != at(h, i)) return NULL;
    for (idx i = 0; i < 6; i++)
        if (at(u, 8 + hn + i) != (ch)wiki[i]) return NULL;
    idx q = PyUnicode_FindChar(url, '?', 0, un, 1);
    if (q != -1) return NULL; /* -2: an error, but none can happen on a ready str */
    idx end = PyUnicode_FindChar(url, '#', start, un, 1);
    if (end < 0) end = un;

    ch stack[256];
    ch *buf = end - start <= 256 ? stack : PyMem_Malloc(sizeof(ch) * (size_t)(end - start));
    if (buf == NULL) return PyErr_NoMemory();
    PyObject *target = NULL, *reason = rv->kept, *id = NULL, *hit = NULL;
    idx n;
    if (PyUnicode_FindChar(url, '%', start, end, 1) >= 0) {
        n = unquote_into(u, start, end, buf);
        if (n < 0) goto done;
    } else {
        n = end - start;
        for (idx i = 0; i < n; i++) buf[i] = at(u, start + i);
    }
    /* " ".join(raw.replace("_", " ").split()) */
    idx m = 0, colon = -1;
    int gap = 0;
    for (idx i = 0; i < n; i++) {
        ch c = buf[i];
        if (c == '_' || is_space(c)) {
            gap = m > 0;
            continue;
        }
        if (gap) buf[m++] = ' ';
        gap = 0;
        if (c == ':' && colon < 0) colon = m;
        buf[m++] = c;
    }
    if (m == 0) {
        reason = rv->external;
    } else if (colon >= 0) {
        int r = in_namespaces(buf, colon, rv->namespaces);
        if (r < 0) goto done;
        if (r) reason = rv->non_article;
    }
    if (reason == rv->kept) {
        target = capitalised(buf, m);
        if (target == NULL) goto done;
        id = doc_id_of(target);
        if (id == NULL) goto done; /* a surrogate: doc_id raises in Python */
    } else {
        target = Py_None;
        id = Py_None;
        Py_INCREF(target);
        Py_INCREF(id);
    }
    hit = PyTuple_Pack(3, target, reason, id);
    if (hit == NULL) goto done;
    if (PyDict_GET_SIZE(cache) >= rv->cache_max) PyDict_Clear(cache);
    if (PyDict_SetItem(cache, url, hit) < 0) Py_CLEAR(hit);

done:
    Py_XDECREF(target);
    Py_XDECREF(id);
    if (buf != stack) PyMem_Free(buf);
    return hit;
}

/* ---- locate_links ------------------------------------------------------------------------------ */

/* Link reasons counted locally, in the order they first occur, and added to the Counter at the end:
 * a call that falls back to Python half-way has then changed nothing. */
#define MAX_TALLY 16
typedef struct {
    PyObject *key[MAX_TALLY]; /* strong references */
    idx n[MAX_TALLY];
    int len;
} Tally;

/* 0, or 1 when the key is not something this tally can count like a dict would (fall back). */
static int tally_add(Tally *t, PyObject *key) {
    for (int i = 0; i < t->len; i++) {
        if (t->key[i] == key) {
            t->n[i]++;
            return 0;
        }
    }
    if (!PyUnicode_CheckExact(key)) return 1;
    for (int i = 0; i < t->len; i++) {
        if (str_equal(t->key[i], key)) {
            t->n[i]++;
            return 0;
        }
    }
    if (t->len == MAX_TALLY) return 1;
    Py_INCREF(key);
    t->key[t->len] = key;
    t->n[t->len++] = 1;
    return 0;
}

/* counts[key] += n for each key, in order (what the Python loop's increments add up to). */
static int tally_apply(Tally *t, PyObject *counts) {
    for (int i = 0; i < t->len; i++) {
        PyObject *old = PyObject_GetItem(counts, t->key[i]); /* Counter.__missing__ gives 0 */
        if (old == NULL) return -1;
        PyObject *inc = PyLong_FromSsize_t(t->n[i]);
        PyObject *sum = inc == NULL ? NULL : PyNumber_Add(old, inc);
        Py_DECREF(old);
        Py_XDECREF(inc);
        if (sum == NULL) return -1;
        int r = PyObject_SetItem(counts, t->key[i], sum);
        Py_DECREF(sum);
        if (r < 0) return -1;
    }
    return 0;
}

static void tally_clear(Tally *t) {
    for (int i = 0; i < t->len; i++) Py_DECREF(t->key[i]);
    t->len = 0;
}

/* " ".join(s.split()) of an exact str (a new reference). */
static PyObject *normalised(PyObject *s) {
    return normalised_range(s, text_of(s), 0, PyUnicode_GET_LENGTH(s), 0);
}

PyDoc_STRVAR(locate_links_doc,
             "locate_links(raw_links, sentences, text, title, host, counts, link_caches, host_cache,\n"
             "             resolve_miss, not_a_url, reasons, cache_max, namespaces)\n--\n\n"
             "abstracts._locate_links; link_caches is _LINK_CACHE, host_cache _host_cache, resolve_miss\n"
             "_resolve_miss, not_a_url _NOT_A_URL, reasons the link reasons (empty anchor, anchor\n"
             "not found, self, duplicate, kept, non-article, external), cache_max _CACHE_MAX and\n"
             "namespaces NON_ARTICLE_NAMESPACES. A cache miss on the usual URL is resolved here (what\n"
             "_resolve_miss does), any other by resolve_miss. None when an input is unusual (the caller\n"
             "runs the Python function).");

static PyObject *locate_links(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "locate_links takes 13 arguments");
        return NULL;
    }
    PyObject *raw_links = args[0], *sentences = args[1], *str = args[2], *title = args[3];
    PyObject *host = args[4], *counts = args[5], *link_caches = args[6], *host_cache = args[7];
    PyObject *resolve_miss = args[8], *not_a_url = args[9], *reasons = args[10];
    if (!PyTuple_CheckExact(reasons) || PyTuple_GET_SIZE(reasons) != 7) {
        PyErr_SetString(PyExc_TypeError, "reasons must be a tuple of 7 reasons");
        return NULL;
    }
    PyObject *r_empty = PyTuple_GET_ITEM(reasons, 0), *r_not_found = PyTuple_GET_ITEM(reasons, 1);
    PyObject *r_self = PyTuple_GET_ITEM(reasons, 2), *r_duplicate = PyTuple_GET_ITEM(reasons, 3);
    PyObject *r_kept = PyTuple_GET_ITEM(reasons, 4);
    /* The miss fast path: only with an exact int bound and an exact set of namespaces (whose `in` is
     * the one PySet_Contains computes). */
    Resolver rv = {NULL, 0, r_kept, PyTuple_GET_ITEM(reasons, 5), PyTuple_GET_ITEM(reasons, 6)};
    if (PyLong_CheckExact(args[11]) && (PyFrozenSet_CheckExact(args[12]) || PySet_CheckExact(args[12]))) {
        int overflow;
        long long bound = PyLong_AsLongLongAndOverflow(args[11], &overflow);
        if (bound == -1 && PyErr_Occurred()) return NULL;
        if (!overflow && bound >= 0 && bound <= PY_SSIZE_T_MAX) {
            rv.namespaces = args[12];
            rv.cache_max = (idx)bound;
        }
    }
    if (!PyList_CheckExact(raw_links) || !PyList_CheckExact(sentences) || !PyUnicode_CheckExact(str) ||
        !PyUnicode_CheckExact(title) || Py_TYPE(counts) != (PyTypeObject *)counter_type ||
        !PyDict_CheckExact(link_caches))
        Py_RETURN_NONE;
    if (PyUnicode_READY(str) < 0 || PyUnicode_READY(title) < 0) return NULL;

    idx n_sent = PyList_GET_SIZE(sentences);
    idx stack_starts[64];
    idx *starts = n_sent <= 64 ? stack_starts : PyMem_Malloc(sizeof(idx) * (size_t)n_sent);
    if (starts == NULL) return PyErr_NoMemory();
    idx pos = 0;
    for (idx i = 0; i < n_sent; i++) {
        PyObject *s = PyList_GET_ITEM(sentences, i);
        if (!PyUnicode_CheckExact(s) || PyUnicode_READY(s) < 0) {
            if (starts != stack_starts) PyMem_Free(starts);
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NONE;
        }
        starts[i] = pos;
        pos += PyUnicode_GET_LENGTH(s) + 1;
    }

    PyObject *out = NULL, *cache = NULL, *link = NULL, *hit = NULL, *anchor = NULL, *result = NULL;
    idx *kept_sentence = NULL;
    idx kept_cap = 0;
    int fallback = 0;
    Tally tally = {.len = 0};

    /* cache = _host_cache(host) */
    cache = PyUnicode_CheckExact(host) ? PyDict_GetItemWithError(link_caches, host) : NULL;
    if (cache != NULL) {
        Py_INCREF(cache);
    } else {
        if (PyErr_Occurred()) goto done;
        cache = PyObject_CallOneArg(host_cache, host);
        if (cache == NULL) goto done;
    }
    if (!PyDict_CheckExact(cache)) {
        fallback = 1;
        goto done;
    }
    out = PyList_New(0);
    if (out == NULL) goto done;

    idx cursor = 0;
    for (idx li = 0; li < PyList_GET_SIZE(raw_links); li++) {
        Py_CLEAR(link);
        Py_CLEAR(hit);
        Py_CLEAR(anchor);
        link = PyList_GET_ITEM(raw_links, li);
        Py_INCREF(link);
        if (!PyDict_CheckExact(link)) { /* link.get may be anything */
            fallback = 1;
            goto done;
        }
        PyObject *url = PyDict_GetItemWithError(link, s_url);
        if (url == NULL && PyErr_Occurred()) goto done;
        if (url != NULL && PyUnicode_Check(url)) {
            if (!PyUnicode_CheckExact(url)) {
                fallback = 1;
                goto done;
            }
            hit = PyDict_GetItemWithError(cache, url);
            if (hit == NULL && PyErr_Occurred()) goto done;
            if (hit != NULL && !PyTuple_CheckExact(hit)) { /* `cache.get(url) or ...` */
                fallback = 1;
                goto done;
            }
            if (hit != NULL && PyTuple_GET_SIZE(hit) > 0) {
                Py_INCREF(hit);
            } else {
                hit = NULL;
                if (PyUnicode_CheckExact(host)) { /* `cache` is _host_cache(host), as for _resolve_miss */
                    hit = resolve_fast(url, host, cache, &rv);
                    if (hit == NULL && PyErr_Occurred()) goto done;
                }
                if (hit == NULL) {
                    Py_INCREF(url); /* the call may free the link */
                    PyObject *call_args[2] = {url, host};
                    hit = PyObject_Vectorcall(resolve_miss, call_args, 2, NULL);
                    Py_DECREF(url);
                    if (hit == NULL) goto done;
                }
            }
        } else {
            hit = not_a_url;
            Py_INCREF(hit);
        }
        if (!PyTuple_CheckExact(hit) || PyTuple_GET_SIZE(hit) != 3) {
            fallback = 1;
            goto done;
        }
        PyObject *target = PyTuple_GET_ITEM(hit, 0), *target_id = PyTuple_GET_ITEM(hit, 2);
        if (target == Py_None) {
            if (tally_add(&tally, PyTuple_GET_ITEM(hit, 1))) {
                fallback = 1;
                goto done;
            }
            continue;
        }
        if (!PyUnicode_CheckExact(target)) {
            fallback = 1;
            goto done;
        }
        if (PyUnicode_READY(target) < 0) goto done;
        PyObject *raw_anchor = PyDict_GetItemWithError(link, s_text);
        if (raw_anchor == NULL && PyErr_Occurred()) goto done;
        if (raw_anchor != NULL && PyUnicode_Check(raw_anchor)) {
            if (!PyUnicode_CheckExact(raw_anchor)) {
                fallback = 1;
                goto done;
            }
            if (PyUnicode_READY(raw_anchor) < 0) goto done;
            anchor = normalised(raw_anchor);
            if (anchor == NULL) goto done;
        }
        if (anchor == NULL || PyUnicode_GET_LENGTH(anchor) == 0) {
            if (tally_add(&tally, r_empty)) {
                fallback = 1;
                goto done;
            }
            continue;
        }
        if (str_equal(target, title)) {
            if (tally_add(&tally, r_self)) {
                fallback = 1;
                goto done;
            }
            continue;
        }
        idx found = PyUnicode_Find(str, anchor, cursor, PY_SSIZE_T_MAX, 1);
        if (found == -1) found = PyUnicode_Find(str, anchor, 0, PY_SSIZE_T_MAX, 1);
        if (found == -2) goto done;
        if (found < 0) {
            if (tally_add(&tally, r_not_found)) {
                fallback = 1;
                goto done;
            }
            continue;
        }
        cursor = found + PyUnicode_GET_LENGTH(anchor);
        /* bisect.bisect_right(starts, found) - 1 */
        idx lo = 0, hi = n_sent;
        while (lo < hi) {
            idx mid = lo + (hi - lo) / 2;
            if (found < starts[mid])
                hi = mid;
            else
                lo = mid + 1;
        }
        idx sentence = lo - 1;
        /* (target, sentence) in seen: the kept links are the seen pairs */
        int seen = 0;
        idx n_kept = PyList_GET_SIZE(out);
        for (idx k = 0; k < n_kept && !seen; k++)
            seen = kept_sentence[k] == sentence &&
                   str_equal(PyTuple_GET_ITEM(PyList_GET_ITEM(out, k), 0), target);
        if (seen) {
            if (tally_add(&tally, r_duplicate)) {
                fallback = 1;
                goto done;
            }
            continue;
        }
        if (tally_add(&tally, r_kept)) {
            fallback = 1;
            goto done;
        }
        if (n_kept == kept_cap) {
            kept_cap = kept_cap ? 2 * kept_cap : 16;
            idx *grown = PyMem_Realloc(kept_sentence, sizeof(idx) * (size_t)kept_cap);
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            kept_sentence = grown;
        }
        kept_sentence[n_kept] = sentence;
        PyObject *number = PyLong_FromSsize_t(sentence);
        if (number == NULL) goto done;
        PyObject *row = PyTuple_Pack(4, target, target_id, anchor, number);
        Py_DECREF(number);
        if (row == NULL) goto done;
        int r = PyList_Append(out, row);
        Py_DECREF(row);
        if (r < 0) goto done;
    }
    result = out;
    out = NULL;

done:
    if (fallback) {
        Py_CLEAR(result);
    } else if (result != NULL) {
        if (tally_apply(&tally, counts) < 0) Py_CLEAR(result);
    } else if (PyErr_Occurred()) {
        /* An error half-way (resolve_miss raised): the Python loop had counted the links before. */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (tally_apply(&tally, counts) < 0) PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    tally_clear(&tally);
    Py_XDECREF(link);
    Py_XDECREF(hit);
    Py_XDECREF(anchor);
    Py_XDECREF(cache);
    Py_XDECREF(out);
    PyMem_Free(kept_sentence);
    if (starts != stack_starts) PyMem_Free(starts);
    if (fallback) Py_RETURN_NONE;
    return result;
}

/* ---- abstract_links ---------------------------------------------------------------------------- */

#define MAX_DEPTH 64 /* deeper trees go to Python (whose recursion limit then decides) */

/* _iter_links(parts) into out: 0, -1 on error, 1 to fall back. */
static int iter_links(PyObject *parts, PyObject *out, int depth) {
    if (depth > MAX_DEPTH) return 1;
    for (idx i = 0; i < PyList_GET_SIZE(parts); i++) {
        PyObject *part = PyList_GET_ITEM(parts, i);
        if (!PyDict_Check(part)) continue;
        if (!PyDict_CheckExact(part)) return 1; /* part.get may be overridden */
        PyObject *links = PyDict_GetItemWithError(part, s_links);
        if (links == NULL && PyErr_Occurred()) return -1;
        if (links != NULL && PyList_Check(links)) {
            if (!PyList_CheckExact(links)) return 1;
            for (idx k = 0; k < PyList_GET_SIZE(links); k++) {
                PyObject *link = PyList_GET_ITEM(links, k);
                if (PyDict_Check(link) && PyList_Append(out, link) < 0) return -1;
            }
        }
        PyObject *sub = PyDict_GetItemWithError(part, s_has_parts);
        if (sub == NULL && PyErr_Occurred()) return -1;
        if (sub != NULL && PyList_Check(sub)) {
            if (!PyList_CheckExact(sub)) return 1;
            Py_INCREF(sub);
            int r = iter_links(sub, out, depth + 1);
            Py_DECREF(sub);
            if (r != 0) return r;
        }
    }
    return 0;
}

/* `name == "Abstract"`: 1 or 0, -1 when the value's == could be anything (fall back). */
static int is_abstract_name(PyObject *name) {
    if (name == NULL || name == Py_None) return 0;
    if (PyUnicode_CheckExact(name)) return PyUnicode_CompareWithASCIIString(name, "Abstract") == 0;
    if (PyLong_CheckExact(name) || PyBool_Check(name) || PyFloat_CheckExact(name) || PyList_CheckExact(name) ||
        PyDict_CheckExact(name) || PyTuple_CheckExact(name))
        return 0;
    return -1;
}

PyDoc_STRVAR(abstract_links_doc,
             "abstract_links(record)\n--\n\n"
             "abstracts.abstract_links(record); None when the record holds something unusual (the caller\n"
             "runs the Python function).");

static PyObject *abstract_links(PyObject *self, PyObject *record) {
    if (!PyDict_CheckExact(record)) Py_RETURN_NONE;
    PyObject *sections = PyDict_GetItemWithError(record, s_sections);
    if (sections == NULL && PyErr_Occurred()) return NULL;
    if (sections == NULL || !PyList_Check(sections)) return PyList_New(0);
    if (!PyList_CheckExact(sections)) Py_RETURN_NONE;
    if (PyList_GET_SIZE(sections) == 0) return PyList_New(0);
    PyObject *lead = NULL;
    for (idx i = 0; i < PyList_GET_SIZE(sections) && lead == NULL; i++) {
        PyObject *s = PyList_GET_ITEM(sections, i);
        if (!PyDict_Check(s)) continue;
        if (!PyDict_CheckExact(s)) Py_RETURN_NONE;
        PyObject *name = PyDict_GetItemWithError(s, s_name);
        if (name == NULL && PyErr_Occurred()) return NULL;
        int r = is_abstract_name(name);
        if (r < 0) Py_RETURN_NONE;
        if (r) lead = s;
    }
    if (lead == NULL) {
        PyObject *first = PyList_GET_ITEM(sections, 0);
        if (!PyDict_Check(first)) return PyList_New(0);
        if (!PyDict_CheckExact(first)) Py_RETURN_NONE;
        lead = first;
    }
    /* lead.get("has_parts") or [] */
    PyObject *parts = PyDict_GetItemWithError(lead, s_has_parts);
    if (parts == NULL && PyErr_Occurred()) return NULL;
    if (parts == NULL || parts == Py_None) return PyList_New(0);
    if (!PyList_CheckExact(parts)) Py_RETURN_NONE; /* iterated as whatever it is */
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    Py_INCREF(parts);
    int r = iter_links(parts, out, 0);
    Py_DECREF(parts);
    if (r != 0) {
        Py_DECREF(out);
        if (r < 0) return NULL;
        Py_RETURN_NONE;
    }
    return out;
}

/* ---- rows_to_buffers (abstracts.rows_to_table) ------------------------------------------------- */

/* A bytes object grown as it is written (amortised doubling), cut to its length at the end. */
typedef struct {
    PyObject *obj;
    idx len, cap;
} Bytes;

static inline char *bytes_at(Bytes *b) { return PyBytes_AS_STRING(b->obj) + b->len; }

static int bytes_reserve(Bytes *b, idx extra) {
    if (b->obj != NULL && b->len + extra <= b->cap) return 0;
    idx cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra) cap *= 2;
    if (b->obj == NULL) {
        b->obj = PyBytes_FromStringAndSize(NULL, cap);
        if (b->obj == NULL) return -1;
    } else if (_PyBytes_Resize(&b->obj, cap) < 0) {
        return -1; /* b->obj is NULL now */
    }
    b->cap = cap;
    return 0;
}

/* The bytes written (a new reference; b is emptied). */
static PyObject *bytes_finish(Bytes *b) {
    if (b->obj == NULL) return PyBytes_FromStringAndSize(NULL, 0);
    if (_PyBytes_Resize(&b->obj, b->len) < 0) return NULL;
    PyObject *out = b->obj;
    b->obj = NULL;
    return out;
}

/* One Arrow array being built: a validity bitmap (kept only if a value is null), int32 offsets and
 * UTF-8 data for a string array, the values for an int64 or int32 one. */
enum { COL_STR, COL_I64, COL_I32 };
typedef struct {
    int type;
    idx n, nulls;
    Bytes valid, offsets, data;
} Col;

#define FALLBACK 1 /* return code: an input the C does not take (Python decides) */

static int col_init(Col *c, int type) {
    memset(c, 0, sizeof *c);
    c->type = type;
    if (type != COL_STR) return 0;
    if (bytes_reserve(&c->offsets, 4) < 0) return -1;
    memset(bytes_at(&c->offsets), 0, 4);
    c->offsets.len = 4;
    return 0;
}

static void col_clear(Col *c) {
    Py_CLEAR(c->valid.obj);
    Py_CLEAR(c->offsets.obj);
    Py_CLEAR(c->data.obj);
}

/* Appends one value: None (a null), an exact str, an exact int in the type's range. 0, -1 on error,
 * FALLBACK for anything else (pa.array converts or rejects it: Python decides). */
static int col_append(Col *c, PyObject *v) {
    int valid = v != Py_None;
    if (c->n % 8 == 0) {
        if (bytes_reserve(&c->valid, 1) < 0) return -1;
        *bytes_at(&c->valid) = 0;
        c->valid.len++;
    }
    if (c->type == COL_STR) {
        if (valid) {
            if (!PyUnicode_CheckExact(v)) return FALLBACK;
            if (PyUnicode_READY(v) < 0) return -1;
            if (bytes_reserve(&c->data, utf8_bound(v)) < 0) return -1;
            idx k = utf8_encode(v, (unsigned char *)bytes_at(&c->data));
            if (k < 0) return FALLBACK; /* a surrogate: pa.array raises */
            c->data.len += k;
        }
        if (c->data.len > INT32_MAX) return FALLBACK; /* past int32 offsets: pa.array chunks it */
        if (bytes_reserve(&c->offsets, 4) < 0) return -1;
        int32_t end = (int32_t)c->data.len;
        memcpy(bytes_at(&c->offsets), &end, 4);
        c->offsets.len += 4;
    } else {
        int64_t x = 0;
        if (valid) {
            if (!PyLong_CheckExact(v)) return FALLBACK; /* bool, float, numpy ints... */
            int overflow;
            long long value = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (value == -1 && PyErr_Occurred()) return -1;
            if (overflow || (c->type == COL_I32 && (value < INT32_MIN || value > INT32_MAX))) return FALLBACK;
            x = value;
        }
        int size = c->type == COL_I64 ? 8 : 4;
        if (bytes_reserve(&c->data, size) < 0) return -1;
        if (size == 8) {
            memcpy(bytes_at(&c->data), &x, 8);
        } else {
            int32_t y = (int32_t)x;
            memcpy(bytes_at(&c->data), &y, 4);
        }
        c->data.len += size;
    }
    if (valid)
        PyBytes_AS_STRING(c->valid.obj)[c->n / 8] |= (char)(1 << (c->n % 8));
    else
        c->nulls++;
    c->n++;
    return 0;
}

/* Appends the int32 offset `end` (a list array's offsets, which start at 0). */
static int offsets_append(Bytes *b, idx end) {
    if (end > INT32_MAX) return FALLBACK;
    if (bytes_reserve(b, 4) < 0) return -1;
    int32_t x = (int32_t)end;
    memcpy(bytes_at(b), &x, 4);
    b->len += 4;
    return 0;
}

/* An array's description for abstracts._array_of_buffers: (length, null_count, buffers, children). */
static PyObject *col_spec(Col *c) {
    PyObject *valid = Py_None, *offsets = NULL, *data = NULL, *buffers = NULL;
    Py_INCREF(valid);
    if (c->nulls) {
        Py_DECREF(valid);
        valid = bytes_finish(&c->valid);
    }
    data = bytes_finish(&c->data);
    if (c->type == COL_STR) offsets = bytes_finish(&c->offsets);
    if (valid != NULL && data != NULL && (c->type != COL_STR || offsets != NULL))
        buffers = c->type == COL_STR ? PyTuple_Pack(3, valid, offsets, data) : PyTuple_Pack(2, valid, data);
    Py_XDECREF(valid);
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    if (buffers == NULL) return NULL;
    return Py_BuildValue("(nnN())", c->n, c->nulls, buffers);
}

/* A list array's description: its offsets (Bytes, emptied) and the one child's description (stolen). */
static PyObject *list_spec(idx n, Bytes *offsets, PyObject *child) {
    if (child == NULL) return NULL;
    PyObject *buf = bytes_finish(offsets);
    if (buf == NULL) {
        Py_DECREF(child);
        return NULL;
    }
    return Py_BuildValue("(nn(ON)(N))", n, (idx)0, Py_None, buf, child);
}

#define N_COLUMNS 10 /* ABSTRACTS_SCHEMA */
#define SENTENCES 7
#define LINKS 8
static const int column_types[N_COLUMNS] = {COL_STR, COL_STR, COL_I64, COL_STR, COL_I64,
                                            COL_STR, COL_STR, COL_STR, COL_STR, COL_STR};
static const int link_types[4] = {COL_STR, COL_STR, COL_STR, COL_I32}; /* LINK_TYPE */

/* One row into the columns: 0, -1 on error, FALLBACK. */
static int append_row(PyObject *row, Col *cols, Col *sentences, Bytes *sent_offsets, Col *links,
                      Bytes *link_offsets) {
    if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != N_COLUMNS) return FALLBACK;
    for (int k = 0; k < N_COLUMNS; k++) {
        PyObject *v = PyTuple_GET_ITEM(row, k);
        int r = 0;
        if (k == SENTENCES) {
            if (!PyList_CheckExact(v)) return FALLBACK; /* `flat += sentences` takes any iterable */
            for (idx i = 0; i < PyList_GET_SIZE(v) && r == 0; i++) r = col_append(sentences, PyList_GET_ITEM(v, i));
            if (r == 0) r = offsets_append(sent_offsets, sentences->n);
        } else if (k == LINKS) {
            if (!PyList_CheckExact(v)) return FALLBACK;
            for (idx i = 0; i < PyList_GET_SIZE(v) && r == 0; i++) {
                PyObject *link = PyList_GET_ITEM(v, i);
                if (!PyTuple_CheckExact(link) || PyTuple_GET_SIZE(link) != 4) return FALLBACK;
                for (int j = 0; j < 4 && r == 0; j++) r = col_append(&links[j], PyTuple_GET_ITEM(link, j));
            }
            if (r == 0) r = offsets_append(link_offsets, links[0].n);
        } else {
            r = col_append(&cols[k], v);
        }
        if (r != 0) return r;
    }
    return 0;
}

PyDoc_STRVAR(rows_to_buffers_doc,
             "rows_to_buffers(rows)\n--\n\n"
             "The Arrow buffers of abstracts.rows_to_table(rows): (length, columns), each column\n"
             "(length, null_count, buffers, children) with buffers as bytes or None, for\n"
             "abstracts._array_of_buffers. None when a row holds anything but exact tuples, lists, str\n"
             "and int in range, or None where a value may be null, and for no rows (the caller runs the\n"
             "Python function).");

static PyObject *rows_to_buffers(PyObject *self, PyObject *rows) {
    if (!PyList_CheckExact(rows) && !PyTuple_CheckExact(rows)) Py_RETURN_NONE;
    idx n_rows = PySequence_Fast_GET_SIZE(rows);
    if (n_rows == 0) Py_RETURN_NONE; /* zip(*[]) has no columns: the Python function raises */
    Col cols[N_COLUMNS], sentences, links[4];
    Bytes sent_offsets = {NULL, 0, 0}, link_offsets = {NULL, 0, 0};
    PyObject *specs = NULL, *out = NULL;
    int r = 0;
    memset(cols, 0, sizeof cols);
    memset(&sentences, 0, sizeof sentences);
    memset(links, 0, sizeof links);
    for (int k = 0; k < N_COLUMNS && r == 0; k++) r = col_init(&cols[k], column_types[k]);
    for (int j = 0; j < 4 && r == 0; j++) r = col_init(&links[j], link_types[j]);
    if (r == 0) r = col_init(&sentences, COL_STR);
    if (r == 0) r = offsets_append(&sent_offsets, 0);
    if (r == 0) r = offsets_append(&link_offsets, 0);
    for (idx i = 0; i < n_rows && r == 0; i++)
        r = append_row(PySequence_Fast_GET_ITEM(rows, i), cols, &sentences, &sent_offsets, links, &link_offsets);
    if (r != 0) goto done;

    specs = PyTuple_New(N_COLUMNS);
    if (specs == NULL) goto done;
    for (int k = 0; k < N_COLUMNS; k++) {
        PyObject *spec;
        if (k == SENTENCES) {
            spec = list_spec(n_rows, &sent_offsets, col_spec(&sentences));
        } else if (k == LINKS) {
            PyObject *fields = PyTuple_New(4);
            for (int j = 0; j < 4 && fields != NULL; j++) {
                PyObject *child = col_spec(&links[j]);
                if (child == NULL) Py_CLEAR(fields);
                else PyTuple_SET_ITEM(fields, j, child);
            }
            PyObject *structs = fields == NULL ? NULL : Py_BuildValue("(nn(O)N)", links[0].n, (idx)0, Py_None, fields);
            spec = list_spec(n_rows, &link_offsets, structs);
        } else {
            spec = col_spec(&cols[k]);
        }
        if (spec == NULL) goto done;
        PyTuple_SET_ITEM(specs, k, spec);
    }
    out = Py_BuildValue("(nO)", n_rows, specs);

done:
    Py_XDECREF(specs);
    for (int k = 0; k < N_COLUMNS; k++) col_clear(&cols[k]);
    for (int j = 0; j < 4; j++) col_clear(&links[j]);
    col_clear(&sentences);
    Py_XDECREF(sent_offsets.obj);
    Py_XDECREF(link_offsets.obj);
    if (r == FALLBACK) Py_RETURN_NONE;
    return out;
}

/* ---- module ------------------------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"split_sentences", (PyCFunction)(void (*)(void))split_sentences, METH_FASTCALL, split_sentences_doc},
    {"locate_links", (PyCFunction)(void (*)(void))locate_links, METH_FASTCALL, locate_links_doc},
    {"abstract_links", abstract_links, METH_O, abstract_links_doc},
    {"rows_to_buffers", rows_to_buffers, METH_O, rows_to_buffers_doc},
    {"doc_id", doc_id_py, METH_O, doc_id_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_abstracts_native",
    "C versions of sentences.split_sentences and abstracts._locate_links / abstract_links.", -1, methods,
    NULL, NULL, NULL, NULL,
};

static int intern(PyObject **slot, const char *s) {
    *slot = PyUnicode_InternFromString(s);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__abstracts_native(void) {
    init_classes();
    if (intern(&s_lower, "lower") < 0 || intern(&s_upper, "upper") < 0 || intern(&s_url, "url") < 0 || intern(&s_text, "text") < 0 ||
        intern(&s_sections, "sections") < 0 || intern(&s_name, "name") < 0 ||
        intern(&s_has_parts, "has_parts") < 0 || intern(&s_links, "links") < 0)
        return NULL;
    PyObject *hashlib = PyImport_ImportModule("hashlib");
    if (hashlib == NULL) return NULL;
    sha256_new = PyObject_GetAttrString(hashlib, "sha256");
    Py_DECREF(hashlib);
    if (sha256_new == NULL) return NULL;
    PyObject *collections = PyImport_ImportModule("collections");
    if (collections == NULL) return NULL;
    counter_type = PyObject_GetAttrString(collections, "Counter");
    Py_DECREF(collections);
    if (counter_type == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
