/*
 * Native scanner of the Kineto / Chrome-trace ``traceEvents`` array (CPython extension; no
 * dependency beyond the C library and Python.h).
 *
 * One pass over the JSON text of the event array, piece by piece as gunzip produces it: every event
 * is validated as strict JSON (RFC 8259 number grammar, escapes, UTF-8) and reduced to the columns
 * that jobs/normalize/kineto/columns.py builds from a msgspec decode. Two defects are repaired as
 * jobs/normalize/kineto/repair.py does (counts and the document offset of the first are reported):
 * non-finite number tokens (NaN, Infinity, inf, nan... optionally signed) read as null, and raw
 * control characters inside strings kept (written as \u00XX escapes in the args text).
 * Duplicate keys (catapult #4343) are counted as jobs/normalize/kineto/dupkeys.py does (the last value is kept,
 * as every JSON parser does): the event's own ph/cat/name/pid/tid/ts/dur/id/bp/args and, inside an args object,
 * correlation / External id / external id / stream / device; the document offsets of the first DUP_OFFSETS.
 * Limits (jobs/normalize/limits.py): nesting depth and string length, set by set_limits(); a file
 * over them ends the scan with status LIMIT. No Python object is created per event: the outputs are growable C arrays
 * (mmap/mremap for the large ones) handed to Python as zero-copy buffers (numpy / Arrow).
 *
 * Whatever this scanner does not reproduce exactly makes it *bail out* (``scan`` returns BAIL with a
 * reason) and the caller re-parses the file with the pure-Python path, which stays the reference:
 * repairs inside args when args are kept verbatim, invalid JSON or UTF-8, lone surrogate escapes,
 * truncation, values of unexpected types in the fields that become columns (e.g. a float pid or a
 * string ts), numbers it cannot convert exactly (> 19 significant digits, |ts| >= 2^53 us).
 *
 * Semantics (mirrors jobs/normalize/kineto/numbers.py and columns.py):
 *   - ts/dur: exact round-half-even(value_us * 1000) of the decimal text (integers, any number of
 *     fraction digits, exponents), as int64 ns; ts of every event, dur of X/i/C rows (B/E events are rows
 *     too, phase codes 6/7, paired into X rows in Python);
 *   - pid/tid: JSON integers in (-2^61, 2^61), strings (interned; Python resolves each distinct
 *     string once: numeric, "stream N", or a label), null/missing;
 *   - cat/name: unescaped UTF-8 (int32 offsets + data + validity), null when missing;
 *   - args: the value's text, compact (whitespace outside strings removed, every token byte for
 *     byte, like msgspec.json.format(indent=-1)) or verbatim; the integer keys correlation,
 *     External id / external id, stream, device parsed (string values flagged for Python); rows
 *     with Collective name / Process Group Name / Group size / Seq flagged (decoded in Python);
 *   - flows (s/f with an ac2g/async_cpu_to_gpu/async+launch or fwdbwd category): kind, ts, id, bp;
 *   - M process_name/thread_name: (pid, tid, args.name) tuples.
 *
 * Public API (module ``_kineto_scan``; ABI below is bumped when it changes):
 *   Scanner(compact_args: bool)
 *   Scanner.set_limits(max_depth: int, max_string: int): containers nested deeper than max_depth
 *       below an event object (its members' values are at depth 1), strings longer than
 *       max_string bytes as written -> LIMIT with reason "depth" / "string".
 *   Scanner.scan(buffer, start: int, end: int, final: bool, base: int) -> (status, pos, reason)
 *       base: document offset of buffer[0] (for the offset of the first repair).
 *       status 0 NEED_MORE: the complete events before ``pos`` are consumed; call again with the
 *                text from ``pos`` on followed by more data (the scanner keeps its own state);
 *              1 DONE: the array's closing ``]`` ends just before ``pos``;
 *              2 BAIL: ``reason`` says why; the scanner must not be used further;
 *              3 LIMIT: a limit is exceeded (``reason``); the scanner must not be used further.
 *   X/i/C events without a valid ts (missing, null or non-finite) are dropped and counted.
 *   Scanner.result() -> dict of read-only buffers (see BUF_NAMES) and counters.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define DEFAULT_MAX_DEPTH 253 /* 256 document levels - 3 (document, traceEvents, event) */
#define I64_MAX INT64_MAX
#define ID_LIMIT (((int64_t)1) << 61)
/* 2^53 us in ns: beyond it numbers.py mixes float and text paths; never seen in real traces */
#define TIME_LIMIT ((int64_t)9007199254740992000LL)

/* ------------------------------------------------------------------ growable buffers */

typedef struct {
    char *p;
    size_t len, cap;
    int mapped; /* p is an mmap'ed region of cap bytes (grown with mremap, no copying) */
} Buf;

#define MAP_FROM ((size_t)1 << 20)
#define DUP_OFFSETS 10 /* repair.py MAX_OFFSETS */

static int buf_grow(Buf *b, size_t extra) {
    size_t need = b->len + extra;
    if (need <= b->cap) return 0;
    size_t nc = b->cap ? b->cap : 4096;
    while (nc < need) nc *= 2;
#if defined(__linux__)
    if (nc >= MAP_FROM) {
        void *q;
        if (b->mapped) {
            q = mremap(b->p, b->cap, nc, MREMAP_MAYMOVE);
        } else {
            q = mmap(NULL, nc, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (q != MAP_FAILED && b->len) memcpy(q, b->p, b->len);
            if (q != MAP_FAILED) free(b->p);
        }
        if (q == MAP_FAILED) return -1;
        b->p = (char *)q;
        b->cap = nc;
        b->mapped = 1;
        return 0;
    }
#endif
    char *q = (char *)realloc(b->p, nc);
    if (!q) return -1;
    b->p = q;
    b->cap = nc;
    return 0;
}

static void buf_free(char *p, size_t cap, int mapped) {
#if defined(__linux__)
    if (mapped) {
        if (p) munmap(p, cap);
        return;
    }
#endif
    (void)cap;
    (void)mapped;
    free(p);
}

/* row columns */
enum {
    R_EID, R_PH, R_TS, R_DUR, R_DUROK, R_PID, R_PIDK, R_TID, R_TIDK,
    R_NAME_OFF, R_NAME, R_NAME_OK, R_CAT_OFF, R_CAT, R_CAT_OK, R_ARGS_OFF, R_ARGS, R_ARGS_OK,
    R_CORR, R_CORR_ST, R_EXT, R_EXT_ST, R_EXTL, R_EXTL_ST, R_STREAM, R_STREAM_ST, R_DEV, R_DEV_ST,
    R_COLL,
    FL_KIND, FL_TS, FL_OK, FL_ID, FL_PID, FL_PIDK, FL_TID, FL_TIDK, FL_ISF, FL_BPE,
    I_OFF, I_DATA,
    N_BUFS
};
static const char *BUF_NAMES[N_BUFS] = {
    "event_id", "ph", "ts", "dur", "dur_ok", "pid", "pid_kind", "tid", "tid_kind",
    "name_off", "name_data", "name_ok", "cat_off", "cat_data", "cat_ok", "args_off", "args_data", "args_ok",
    "correlation", "correlation_st", "external_id", "external_id_st", "external_id_legacy",
    "external_id_legacy_st", "stream", "stream_st", "device", "device_st",
    "coll",
    "f_kind", "f_ts", "f_ok", "f_id", "f_pid", "f_pid_kind", "f_tid", "f_tid_kind", "f_is_f", "f_bp_e",
    "id_off", "id_data",
};

/* ------------------------------------------------------------------ scanner object */

typedef struct {
    PyObject_HEAD
    int compact;
    int broken;
    int state; /* 0 after '[', 1 after ',', 2 after a value */
    int64_t n_events;
    int64_t n_rows;
    int64_t n_unsupported;
    int ts_float;
    Buf b[N_BUFS];
    Buf scratch;  /* unescaped strings */
    Buf scratch2;
    /* interned pid/tid strings: open addressing over codes (code + 1, 0 = empty) */
    int32_t *htab;
    size_t hcap;
    int64_t n_ids;
    int64_t row_room, flow_room; /* rows / flow points that fit without growing */
    PyObject *metas; /* list of (which, pid_kind, pid, tid_kind, tid, name) */
    int64_t max_depth;   /* containers below an event object, see set_limits */
    int64_t max_string;  /* bytes of one string literal as written */
    int64_t n_nonfinite; /* repairs: non-finite tokens read as null */
    int64_t n_ctrl;      /* repairs: raw control characters inside strings */
    int64_t first_repair; /* document offset of the first repair, -1 */
    int64_t n_dup;        /* duplicate keys (see dupkeys.py) */
    int64_t dup_off[DUP_OFFSETS]; /* document offsets of the first ones (their opening quote) */
    int64_t n_invalid_ts; /* X/i/C events dropped: no valid ts */
} Scanner;

/* ------------------------------------------------------------------ parse context */

typedef struct {
    const unsigned char *p, *end;
    int final;
    jmp_buf jb;
    Scanner *s;
    const unsigned char *base_ptr; /* buffer[0] */
    int64_t base_off;              /* its document offset */
} Ctx;

static const char *g_reason; /* why the last scan bailed (read after longjmp; the GIL is held) */

enum { JMP_INCOMPLETE = 1, JMP_BAIL = 2, JMP_NOMEM = 3, JMP_LIMIT = 4 };

static void incomplete(Ctx *c) {
    if (c->final) {
        g_reason = "truncated JSON";
        longjmp(c->jb, JMP_BAIL);
    }
    longjmp(c->jb, JMP_INCOMPLETE);
}

static void bail(Ctx *c, const char *why) {
    g_reason = why;
    longjmp(c->jb, JMP_BAIL);
}

static void nomem(Ctx *c) { longjmp(c->jb, JMP_NOMEM); }

/* a limit of set_limits is exceeded: which = "depth" or "string" */
static void limit(Ctx *c, const char *which) {
    g_reason = which;
    longjmp(c->jb, JMP_LIMIT);
}

/* a lenient repair at p (see repair.py) */
static inline void note_repair(Ctx *c, const unsigned char *p, int64_t *counter) {
    (*counter)++;
    if (c->s->first_repair < 0) c->s->first_repair = c->base_off + (int64_t)(p - c->base_ptr);
}

/* a duplicate key whose opening quote is at q */
static void note_dup(Ctx *c, const unsigned char *q) {
    Scanner *s = c->s;
    if (s->n_dup < DUP_OFFSETS) s->dup_off[s->n_dup] = c->base_off + (int64_t)(q - c->base_ptr);
    s->n_dup++;
}

static inline void reserve(Ctx *c, Buf *b, size_t extra) {
    if (b->len + extra > b->cap && buf_grow(b, extra) < 0) nomem(c);
}

/* Fixed-size columns are reserved for ROOM rows at a time (see reserve_rows); NPUSH writes
 * without a capacity check. */
#define ROOM 4096
#define NPUSH(c, idx, T, v)                                  \
    do {                                                     \
        Buf *_b = &(c)->s->b[idx];                           \
        *(T *)(_b->p + _b->len) = (T)(v);                    \
        _b->len += sizeof(T);                                \
    } while (0)

#define PUSH(c, idx, T, v)                                   \
    do {                                                     \
        Buf *_b = &(c)->s->b[idx];                           \
        reserve((c), _b, sizeof(T));                         \
        *(T *)(_b->p + _b->len) = (T)(v);                    \
        _b->len += sizeof(T);                                \
    } while (0)

static inline void put_bytes(Ctx *c, Buf *b, const void *src, size_t n) {
    reserve(c, b, n);
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static inline void put_byte(Ctx *c, Buf *b, unsigned char ch) {
    reserve(c, b, 1);
    b->p[b->len++] = (char)ch;
}

/* Unchecked writes into the args heap: parse_args reserves (remaining input + 16) bytes first,
 * and the args text written is never longer than the input it comes from. */
static inline void put_byte_nc(Buf *b, unsigned char ch) { b->p[b->len++] = (char)ch; }

static inline void put_bytes_nc(Ctx *c, Buf *b, const unsigned char *src, size_t n) {
    char *d = b->p + b->len;
    if (n <= 16 && src + 16 <= c->end) { /* short token: one 16-byte copy */
        memcpy(d, src, 16);
    } else {
        memcpy(d, src, n);
    }
    b->len += n;
}

/* character classes: 1 = needs attention inside a string ('"', '\\', < 0x20, >= 0x80) */
static unsigned char STR_CLS[256];
static unsigned char WS[256];

static void init_tables(void) {
    for (int i = 0; i < 256; i++) {
        STR_CLS[i] = (i < 0x20 || i == '"' || i == '\\' || i >= 0x80) ? 1 : 0;
        WS[i] = (i == ' ' || i == '\t' || i == '\n' || i == '\r') ? 1 : 0;
    }
}

static inline void skip_ws(Ctx *c) {
    const unsigned char *p = c->p, *e = c->end;
    if (p < e && !WS[*p]) return;
    if (p + 1 < e && !WS[p[1]]) { /* a single blank */
        c->p = p + 1;
        return;
    }
#if defined(__SSE2__)
    const __m128i sp = _mm_set1_epi8(' '), nl = _mm_set1_epi8('\n'), tb = _mm_set1_epi8('\t'),
                  cr = _mm_set1_epi8('\r');
    while (p + 16 <= e) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i w = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, sp), _mm_cmpeq_epi8(v, nl)),
                                 _mm_or_si128(_mm_cmpeq_epi8(v, tb), _mm_cmpeq_epi8(v, cr)));
        unsigned mask = ~(unsigned)_mm_movemask_epi8(w) & 0xFFFFu;
        if (mask) {
            c->p = p + __builtin_ctz(mask);
            return;
        }
        p += 16;
    }
#endif
    while (p < e && WS[*p]) p++;
    c->p = p;
    if (p >= e) incomplete(c);
}

static inline int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static unsigned read_u4(Ctx *c, const unsigned char *p) {
    if (c->end - p < 4) incomplete(c);
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) bail(c, "invalid \\u escape");
        v = (v << 4) | (unsigned)h;
    }
    return v;
}

/* Scan a string at c->p (which is '"'): validates it, returns the content start, sets *n and *esc.
 * c->p ends after the closing quote. */
static inline __attribute__((always_inline)) const unsigned char *scan_string(Ctx *c, size_t *n, int *esc) {
    const unsigned char *start = c->p + 1, *p = start, *e = c->end;
    int has_esc = 0;
    for (;;) {
#if defined(__SSE2__)
        {
            const __m128i q = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'), lim = _mm_set1_epi8(0x1F);
            while (p + 16 <= e) {
                __m128i v = _mm_loadu_si128((const __m128i *)p);
                __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, q), _mm_cmpeq_epi8(v, bs)),
                                         _mm_cmpeq_epi8(_mm_max_epu8(v, lim), lim));
                unsigned mask = (unsigned)_mm_movemask_epi8(m) | (unsigned)_mm_movemask_epi8(v);
                if (mask) {
                    p += __builtin_ctz(mask);
                    goto special;
                }
                p += 16;
            }
        }
#else
        while (p + 8 <= e) {
            /* 8 plain bytes at a time */
            if (STR_CLS[p[0]] | STR_CLS[p[1]] | STR_CLS[p[2]] | STR_CLS[p[3]] | STR_CLS[p[4]] | STR_CLS[p[5]] |
                STR_CLS[p[6]] | STR_CLS[p[7]])
                break;
            p += 8;
        }
#endif
        while (p < e && !STR_CLS[*p]) p++;
#if defined(__SSE2__)
    special:
#endif
        if ((int64_t)(p - start) > c->s->max_string) limit(c, "string");
        if (p >= e) incomplete(c);
        unsigned ch = *p;
        if (ch == '"') {
            *n = (size_t)(p - start);
            *esc = has_esc;
            c->p = p + 1;
            return start;
        }
        if (ch == '\\') {
            has_esc = 1;
            if (p + 1 >= e) incomplete(c);
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                break;
            case 'u': {
                unsigned v = read_u4(c, p + 2);
                p += 6;
                if (v >= 0xD800 && v <= 0xDBFF) {
                    if (e - p < 2) incomplete(c);
                    if (p[0] != '\\' || p[1] != 'u') bail(c, "lone surrogate escape");
                    unsigned w = read_u4(c, p + 2);
                    if (w < 0xDC00 || w > 0xDFFF) bail(c, "lone surrogate escape");
                    p += 6;
                } else if (v >= 0xDC00 && v <= 0xDFFF) {
                    bail(c, "lone surrogate escape");
                }
                break;
            }
            default:
                bail(c, "invalid escape");
            }
            continue;
        }
        if (ch < 0x20) { /* repaired: kept as the character (B02) */
            note_repair(c, p, &c->s->n_ctrl);
            has_esc |= 2;
            p++;
            continue;
        }
        /* UTF-8 sequence */
        if (ch >= 0xC2 && ch <= 0xDF) {
            if (e - p < 2) incomplete(c);
            if ((p[1] & 0xC0) != 0x80) bail(c, "invalid UTF-8");
            p += 2;
        } else if (ch >= 0xE0 && ch <= 0xEF) {
            if (e - p < 3) incomplete(c);
            unsigned c1 = p[1], c2 = p[2];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80) bail(c, "invalid UTF-8");
            if (ch == 0xE0 && c1 < 0xA0) bail(c, "invalid UTF-8");
            if (ch == 0xED && c1 > 0x9F) bail(c, "invalid UTF-8");
            p += 3;
        } else if (ch >= 0xF0 && ch <= 0xF4) {
            if (e - p < 4) incomplete(c);
            unsigned c1 = p[1];
            if ((c1 & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) bail(c, "invalid UTF-8");
            if (ch == 0xF0 && c1 < 0x90) bail(c, "invalid UTF-8");
            if (ch == 0xF4 && c1 > 0x8F) bail(c, "invalid UTF-8");
            p += 4;
        } else {
            bail(c, "invalid UTF-8");
        }
    }
}

/* Unescape a validated string body into *out (cleared first). */
static void unescape(Ctx *c, const unsigned char *p, size_t n, Buf *out) {
    out->len = 0;
    reserve(c, out, n + 4);
    const unsigned char *e = p + n;
    char *o = out->p;
    while (p < e) {
        unsigned ch = *p;
        if (ch != '\\') {
            *o++ = (char)ch;
            p++;
            continue;
        }
        ch = p[1];
        p += 2;
        switch (ch) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        default: { /* 'u', validated by scan_string */
            unsigned v = 0;
            for (int i = 0; i < 4; i++) v = (v << 4) | (unsigned)hexval(p[i]);
            p += 4;
            if (v >= 0xD800 && v <= 0xDBFF) {
                unsigned w = 0;
                for (int i = 0; i < 4; i++) w = (w << 4) | (unsigned)hexval(p[2 + i]);
                p += 6;
                v = 0x10000 + ((v - 0xD800) << 10) + (w - 0xDC00);
            }
            if (v < 0x80) {
                *o++ = (char)v;
            } else if (v < 0x800) {
                *o++ = (char)(0xC0 | (v >> 6));
                *o++ = (char)(0x80 | (v & 0x3F));
            } else if (v < 0x10000) {
                *o++ = (char)(0xE0 | (v >> 12));
                *o++ = (char)(0x80 | ((v >> 6) & 0x3F));
                *o++ = (char)(0x80 | (v & 0x3F));
            } else {
                *o++ = (char)(0xF0 | (v >> 18));
                *o++ = (char)(0x80 | ((v >> 12) & 0x3F));
                *o++ = (char)(0x80 | ((v >> 6) & 0x3F));
                *o++ = (char)(0x80 | (v & 0x3F));
            }
        }
        }
    }
    out->len = (size_t)(o - out->p);
}

/* A JSON number as scanned: value = (neg ? -1 : 1) * m * 10^(exp - frac). */
typedef struct {
    uint64_t m;  /* significant digits (at most 19) */
    int nd;      /* number of significant digits in m */
    int frac;    /* fraction digits consumed (including leading zeros of the value) */
    long exp;    /* exponent */
    int neg;
    int big;     /* more than 19 significant digits, or an exponent beyond +-100000 */
} Num;

/* SWAR: are the 8 bytes of v (little-endian) all ASCII digits; their value (fast_float's trick). */
static inline int is_8digits(uint64_t v) {
    return ((v & 0xF0F0F0F0F0F0F0F0ULL) | (((v + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4)) ==
           0x3333333333333333ULL;
}

static inline uint32_t parse_8digits(uint64_t v) {
    const uint64_t mask = 0x000000FF000000FFULL, mul1 = 0x000F424000000064ULL, mul2 = 0x0000271000000001ULL;
    v -= 0x3030303030303030ULL;
    v = (v * 10) + (v >> 8);
    v = (((v & mask) * mul1) + (((v >> 16) & mask) * mul2)) >> 32;
    return (uint32_t)v;
}

static inline uint64_t load8(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Scan a number at c->p (strict JSON grammar), parsing it into *num when num != NULL. Returns its
 * start; *n its length; *is_float when it has a fraction or an exponent. */
static inline __attribute__((always_inline)) const unsigned char *scan_number(Ctx *c, size_t *n, int *is_float, Num *num) {
    const unsigned char *start = c->p, *p = start, *e = c->end;
    uint64_t m = 0;
    int nd = 0, frac = 0, big = 0, fl = 0, neg = 0;
    long exp = 0;
    if (*p == '-') {
        neg = 1;
        p++;
        if (p >= e) incomplete(c);
    }
    if (*p == '0') {
        p++;
    } else if ((unsigned)(*p - '1') < 9) {
        while (nd <= 11 && p + 8 <= e && is_8digits(load8(p))) {
            m = m * 100000000ULL + parse_8digits(load8(p));
            nd += 8;
            p += 8;
        }
        while (p < e && (unsigned)(*p - '0') < 10) {
            if (nd < 19) {
                m = m * 10 + (unsigned)(*p - '0');
                nd++;
            } else {
                big = 1;
            }
            p++;
        }
        /* digits beyond 19 in the integer part scale the value: keep them counted */
    } else {
        bail(c, "invalid number");
    }
    if (p >= e) incomplete(c);
    if (*p == '.') {
        fl = 1;
        p++;
        if (p >= e) incomplete(c);
        if ((unsigned)(*p - '0') >= 10) bail(c, "invalid number");
        while (m != 0 && nd <= 11 && p + 8 <= e && is_8digits(load8(p))) {
            m = m * 100000000ULL + parse_8digits(load8(p));
            nd += 8;
            frac += 8;
            p += 8;
        }
        while (p < e && (unsigned)(*p - '0') < 10) {
            unsigned d = (unsigned)(*p - '0');
            if (m == 0 && d == 0) {
                frac++;
            } else if (nd < 19) {
                m = m * 10 + d;
                nd++;
                frac++;
            } else {
                big = 1;
            }
            p++;
        }
        if (p >= e) incomplete(c);
    }
    if (*p == 'e' || *p == 'E') {
        fl = 1;
        p++;
        if (p >= e) incomplete(c);
        int eneg = 0;
        if (*p == '+' || *p == '-') {
            eneg = *p == '-';
            p++;
            if (p >= e) incomplete(c);
        }
        if ((unsigned)(*p - '0') >= 10) bail(c, "invalid number");
        while (p < e && (unsigned)(*p - '0') < 10) {
            if (exp < 100000) exp = exp * 10 + (*p - '0');
            else big = 1;
            p++;
        }
        if (p >= e) incomplete(c);
        if (eneg) exp = -exp;
    }
    *n = (size_t)(p - start);
    *is_float = fl;
    c->p = p;
    if (num) {
        num->m = m;
        num->nd = nd;
        num->frac = frac;
        num->exp = exp;
        num->neg = neg;
        num->big = big;
    }
    return start;
}

static void scan_literal(Ctx *c, const char *lit, size_t n) {
    if ((size_t)(c->end - c->p) < n) {
        if (memcmp(c->p, lit, (size_t)(c->end - c->p)) != 0) bail(c, "invalid literal");
        incomplete(c);
    }
    if (memcmp(c->p, lit, n) != 0) bail(c, "invalid literal");
    c->p += n;
}

/* Value kinds (V_NONF: a non-finite number token, read as null) */
enum { V_MISSING = 0, V_STR, V_NUM, V_NULL, V_BOOL, V_OBJ, V_ARR, V_NONF };

/* Non-finite number spellings repaired to null (jobs/normalize/kineto/repair.py NONFINITE_TOKENS). */
static const char *const NONFINITE[9] = {"NaN", "nan", "NAN", "Infinity", "infinity", "INFINITY", "inf", "Inf", "INF"};

static inline int ident_char(unsigned ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* A non-finite token at c->p ("-"? then one of NONFINITE as a whole word): consume it, count the
 * repair and return 1; else return 0 with c->p unchanged. */
static int scan_nonfinite(Ctx *c) {
    const unsigned char *start = c->p, *p = start, *e = c->end;
    if (p < e && *p == '-') p++;
    const unsigned char *w = p;
    while (p < e && ident_char(*p) && p - w < 9) p++;
    if (p >= e && !c->final) incomplete(c); /* the word may continue in the next piece */
    if (p < e && ident_char(*p)) return 0;  /* longer than any spelling */
    size_t n = (size_t)(p - w);
    for (int i = 0; i < 9; i++) {
        if (strlen(NONFINITE[i]) == n && memcmp(w, NONFINITE[i], n) == 0) {
            note_repair(c, start, &c->s->n_nonfinite);
            c->p = p;
            return 1;
        }
    }
    return 0;
}

/* Writers into the args heap that may write more than they read (repairs): each reserves for
 * itself plus the rest of the input, so the unchecked writes that follow stay in bounds. */
static void put_null(Ctx *c, Buf *out) {
    reserve(c, out, 4 + (size_t)(c->end - c->p) + 16);
    memcpy(out->p + out->len, "null", 4);
    out->len += 4;
}

/* '"' + string body + '"'; a body with raw control characters (flag & 2) gets \u00XX escapes. */
static void put_str_lit(Ctx *c, Buf *out, const unsigned char *body, size_t n, int flag) {
    if (!(flag & 2)) {
        put_bytes_nc(c, out, body - 1, n + 2);
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += body[i] < 0x20;
    reserve(c, out, n + 2 + 5 * k + (size_t)(c->end - c->p) + 16);
    static const char HEX[] = "0123456789abcdef";
    char *o = out->p + out->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned ch = body[i];
        if (ch < 0x20) {
            memcpy(o, "\\u00", 4);
            o[4] = HEX[ch >> 4];
            o[5] = HEX[ch & 15];
            o += 6;
        } else {
            *o++ = (char)ch;
        }
    }
    *o++ = '"';
    out->len = (size_t)(o - out->p);
}

/* Skip (validate) any value; if out != NULL, append its compact text to out. */
static void value(Ctx *c, int depth, Buf *out);

/* An object key and its ':' (copied to out when given, repaired as put_str_lit does); c->p ends on the
 * value. Returns the key's raw body (length *n, escape flags *esc). */
static inline const unsigned char *object_key(Ctx *c, Buf *out, size_t *n, int *esc) {
    if (*c->p != '"') bail(c, "object key expected");
    const unsigned char *k = scan_string(c, n, esc);
    if (out) put_str_lit(c, out, k, *n, *esc);
    skip_ws(c);
    if (*c->p != ':') bail(c, "':' expected");
    c->p++;
    if (out) put_byte_nc(out, ':');
    skip_ws(c);
    return k;
}

static void container(Ctx *c, int depth, Buf *out) {
    unsigned char open = *c->p;
    unsigned char close = open == '{' ? '}' : ']';
    if (depth > c->s->max_depth) limit(c, "depth");
    c->p++;
    if (out) put_byte_nc(out, open);
    skip_ws(c);
    if (*c->p == close) {
        c->p++;
        if (out) put_byte_nc(out, close);
        return;
    }
    for (;;) {
        if (open == '{') {
            size_t n;
            int esc;
            object_key(c, out, &n, &esc);
        }
        value(c, depth + 1, out);
        skip_ws(c);
        if (*c->p == ',') {
            c->p++;
            if (out) put_byte_nc(out, ',');
            skip_ws(c);
            continue;
        }
        if (*c->p == close) {
            c->p++;
            if (out) put_byte_nc(out, close);
            return;
        }
        bail(c, "',' or closing bracket expected");
    }
}

static void value(Ctx *c, int depth, Buf *out) {
    unsigned ch = *c->p;
    size_t n;
    int x;
    const unsigned char *s;
    switch (ch) {
    case '"':
        s = scan_string(c, &n, &x);
        if (out) put_str_lit(c, out, s, n, x);
        return;
    case '{': case '[':
        container(c, depth, out);
        return;
    case 't':
        scan_literal(c, "true", 4);
        if (out) put_bytes_nc(c, out, c->p - 4, 4);
        return;
    case 'f':
        scan_literal(c, "false", 5);
        if (out) put_bytes_nc(c, out, c->p - 5, 5);
        return;
    case 'n':
        if (scan_nonfinite(c)) {
            if (out) put_null(c, out);
            return;
        }
        scan_literal(c, "null", 4);
        if (out) put_bytes_nc(c, out, c->p - 4, 4);
        return;
    default:
        if (ch == '-' || (ch >= '0' && ch <= '9')) {
            if (ch == '-' && scan_nonfinite(c)) {
                if (out) put_null(c, out);
                return;
            }
            s = scan_number(c, &n, &x, NULL);
            if (out) put_bytes_nc(c, out, s, n);
            return;
        }
        if ((ch == 'N' || ch == 'I' || ch == 'i') && scan_nonfinite(c)) {
            if (out) put_null(c, out);
            return;
        }
        bail(c, "unexpected character (not JSON)");
    }
}

/* ------------------------------------------------------------------ numbers */

static const uint64_t POW10[20] = {
    1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL, 100000000ULL,
    1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL, 10000000000000ULL,
    100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL, 100000000000000000ULL,
    1000000000000000000ULL, 10000000000000000000ULL};

/* Exact round-half-even(value * 10^scale_add) as int64. Returns 0 ok, 1 out of int64 range
 * (invalid value), 2 cannot convert exactly here (bail). */
static int num_scaled(const Num *x, int scale_add, int64_t *out) {
    if (x->big) return 2;
    uint64_t m = x->m;
    if (m == 0) {
        *out = 0;
        return 0;
    }
    long scale = x->exp - x->frac + scale_add;
    uint64_t r;
    if (scale >= 0) {
        if (scale > 19) return 1;
        uint64_t pw = POW10[scale];
        if (m > (uint64_t)I64_MAX / pw) return 1;
        r = m * pw;
    } else {
        long k = -scale;
        if (k > 19) {
            r = 0; /* m < 10^19 <= 10^k / 10: below half a unit */
        } else {
            uint64_t pw = POW10[k];
            uint64_t q = m / pw, rem = m % pw;
            uint64_t half = pw / 2; /* pw is even for k >= 1 */
            if (rem > half || (rem == half && (q & 1))) q++;
            r = q;
        }
    }
    if (r > (uint64_t)I64_MAX) return 1;
    *out = x->neg ? -(int64_t)r : (int64_t)r;
    return 0;
}

/* JSON integer (no fraction/exponent) -> int64. Returns 0 ok, 1 out of range. */
static inline int num_int(const Num *x, int64_t *out) {
    if (x->big) return 1;
    if (x->neg) {
        if (x->m > (uint64_t)I64_MAX + 1) return 1;
        *out = (int64_t)(0 - x->m);
    } else {
        if (x->m > (uint64_t)I64_MAX) return 1;
        *out = (int64_t)x->m;
    }
    return 0;
}

/* ------------------------------------------------------------------ interning of id strings */

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static int64_t intern(Ctx *c, const char *p, size_t n) {
    Scanner *s = c->s;
    Buf *off = &s->b[I_OFF], *data = &s->b[I_DATA];
    if (s->hcap == 0 || (size_t)(s->n_ids + 1) * 2 > s->hcap) {
        size_t nc = s->hcap ? s->hcap * 2 : 64;
        int32_t *t = (int32_t *)calloc(nc, sizeof(int32_t));
        if (!t) nomem(c);
        const int64_t *o = (const int64_t *)off->p;
        for (int64_t i = 0; i < s->n_ids; i++) {
            uint64_t h = hash_bytes(data->p + o[i], (size_t)(o[i + 1] - o[i]));
            size_t j = (size_t)h & (nc - 1);
            while (t[j]) j = (j + 1) & (nc - 1);
            t[j] = (int32_t)(i + 1);
        }
        free(s->htab);
        s->htab = t;
        s->hcap = nc;
    }
    uint64_t h = hash_bytes(p, n);
    size_t j = (size_t)h & (s->hcap - 1);
    const int64_t *o = (const int64_t *)off->p;
    while (s->htab[j]) {
        int64_t i = s->htab[j] - 1;
        if ((size_t)(o[i + 1] - o[i]) == n && memcmp(data->p + o[i], p, n) == 0) return i;
        j = (j + 1) & (s->hcap - 1);
    }
    int64_t code = s->n_ids++;
    put_bytes(c, data, p, n);
    PUSH(c, I_OFF, int64_t, (int64_t)data->len);
    s->htab[j] = (int32_t)(code + 1);
    return code;
}

/* ------------------------------------------------------------------ events */

typedef struct {
    int kind;
    const unsigned char *p;
    size_t n;
    int flag; /* strings: has escapes; numbers: is float */
    Num num;  /* numbers */
} Val;

/* args keys we read */
enum { A_CORR, A_EXT, A_EXTL, A_STREAM, A_DEV, A_NAME, N_AKEYS };

typedef struct {
    Val f_ph, f_cat, f_name, f_pid, f_tid, f_ts, f_dur, f_id, f_bp;
    int has_args;
    size_t args_start; /* offset in the args heap */
    size_t args_len;
    Val a[N_AKEYS];
    int coll;
} Event;

/* Read a value into v (its kind and span); strings and numbers are kept as spans, other values
 * are validated and skipped. */
static void read_val(Ctx *c, int depth, Val *v) {
    unsigned ch = *c->p;
    v->p = c->p;
    v->flag = 0;
    if (ch == '"') {
        v->kind = V_STR;
        v->p = scan_string(c, &v->n, &v->flag);
    } else if ((ch == '-' || ch == 'n' || ch == 'N' || ch == 'I' || ch == 'i') && scan_nonfinite(c)) {
        v->kind = V_NONF;
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        v->kind = V_NUM;
        v->p = scan_number(c, &v->n, &v->flag, &v->num);
    } else if (ch == 'n') {
        scan_literal(c, "null", 4);
        v->kind = V_NULL;
    } else if (ch == 't' || ch == 'f') {
        value(c, depth, NULL);
        v->kind = V_BOOL;
    } else if (ch == '{' || ch == '[') {
        value(c, depth, NULL);
        v->kind = ch == '{' ? V_OBJ : V_ARR;
    } else {
        bail(c, "unexpected character (not JSON)");
    }
}

/* key text (unescaped when needed) */
static const unsigned char *key_text(Ctx *c, const unsigned char *k, size_t *n, int esc, Buf *scratch) {
    if (!esc) return k;
    unescape(c, k, *n, scratch);
    *n = scratch->len;
    return (const unsigned char *)scratch->p;
}

static inline __attribute__((always_inline)) int bytes_eq(const unsigned char *a, const char *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != (unsigned char)b[i]) return 0;
    return 1;
}
/* constant-length comparison (unrolled by the compiler; memcmp would be a call) */
#define KEY_IS(k, n, lit) ((n) == sizeof(lit) - 1 && bytes_eq((k), (lit), sizeof(lit) - 1))

/* The args object: compact copy into the heap while recording the keys we read. */
static void parse_args(Ctx *c, Event *ev) {
    Scanner *s = c->s;
    Buf *heap = &s->b[R_ARGS];
    heap->len = ev->args_start; /* a repeated "args" key: the last one wins */
    for (int i = 0; i < N_AKEYS; i++) ev->a[i].kind = V_MISSING;
    ev->coll = 0;
    ev->has_args = 1;
    reserve(c, heap, (size_t)(c->end - c->p) + 16); /* longer only by repairs, which reserve more */
    const unsigned char *vstart = c->p;
    int64_t repairs0 = s->n_nonfinite + s->n_ctrl;
    if (*c->p != '{') {
        value(c, 1, s->compact ? heap : NULL);
        if (!s->compact) {
            if (s->n_nonfinite + s->n_ctrl != repairs0) bail(c, "repair inside verbatim args");
            put_bytes_nc(c, heap, vstart, (size_t)(c->p - vstart));
        }
        ev->args_len = heap->len - ev->args_start;
        return;
    }
    if (1 > s->max_depth) limit(c, "depth");
    Buf *out = s->compact ? heap : NULL;
    c->p++;
    if (out) put_byte_nc(out, '{');
    skip_ws(c);
    if (*c->p == '}') {
        c->p++;
        if (out) put_byte_nc(out, '}');
    } else {
        for (;;) {
            size_t n;
            int esc;
            const unsigned char *k = object_key(c, out, &n, &esc);
            const unsigned char *kt = key_text(c, k, &n, esc, &s->scratch);
            int slot = -1;
            switch (n) {
            case 4:
                if (KEY_IS(kt, n, "name")) slot = A_NAME;
                break;
            case 6:
                if (KEY_IS(kt, n, "stream")) slot = A_STREAM;
                else if (KEY_IS(kt, n, "device")) slot = A_DEV;
                break;
            case 11:
                if (KEY_IS(kt, n, "correlation")) slot = A_CORR;
                else if (KEY_IS(kt, n, "External id")) slot = A_EXT;
                else if (KEY_IS(kt, n, "external id")) slot = A_EXTL;
                break;
            case 3:
                if (KEY_IS(kt, n, "Seq")) ev->coll = 1;
                break;
            case 10:
                if (KEY_IS(kt, n, "Group size")) ev->coll = 1;
                break;
            case 15:
                if (KEY_IS(kt, n, "Collective name")) ev->coll = 1;
                break;
            case 18:
                if (KEY_IS(kt, n, "Process Group Name")) ev->coll = 1;
                break;
            }
            if (slot >= 0) {
                if (slot != A_NAME && ev->a[slot].kind != V_MISSING) note_dup(c, k - 1);
                const unsigned char *vs = c->p;
                read_val(c, 2, &ev->a[slot]);
                if (out) {
                    Val *a = &ev->a[slot];
                    if (a->kind == V_OBJ || a->kind == V_ARR) {
                        /* rare: re-scan the container to compact it (its repairs are counted once) */
                        const unsigned char *save = c->p;
                        int64_t nf = s->n_nonfinite, nc = s->n_ctrl, fr = s->first_repair;
                        c->p = vs;
                        value(c, 2, out);
                        c->p = save;
                        s->n_nonfinite = nf;
                        s->n_ctrl = nc;
                        s->first_repair = fr;
                    } else if (a->kind == V_NONF) {
                        put_null(c, out);
                    } else if (a->kind == V_STR) {
                        put_str_lit(c, out, a->p, a->n, a->flag);
                    } else {
                        put_bytes_nc(c, out, vs, (size_t)(c->p - vs));
                    }
                }
            } else {
                value(c, 2, out);
            }
            skip_ws(c);
            if (*c->p == ',') {
                c->p++;
                if (out) put_byte_nc(out, ',');
                skip_ws(c);
                continue;
            }
            if (*c->p == '}') {
                c->p++;
                if (out) put_byte_nc(out, '}');
                break;
            }
            bail(c, "',' or '}' expected");
        }
    }
    if (!s->compact) {
        if (s->n_nonfinite + s->n_ctrl != repairs0) bail(c, "repair inside verbatim args");
        put_bytes_nc(c, heap, vstart, (size_t)(c->p - vstart));
    }
    ev->args_len = heap->len - ev->args_start;
}

static int phase_code(Ctx *c, const Val *v) {
    if (v->kind != V_STR) return -1;
    const unsigned char *p = v->p;
    size_t n = v->n;
    if (v->flag) {
        unescape(c, p, n, &c->s->scratch);
        p = (const unsigned char *)c->s->scratch.p;
        n = c->s->scratch.len;
    }
    if (n != 1) return -1;
    switch (p[0]) {
    case 'X': return 0;
    case 'i': return 1;
    case 'C': return 2;
    case 'M': return 3;
    case 's': return 4;
    case 'f': return 5;
    case 'B': return 6;
    case 'E': return 7;
    }
    return -1;
}

/* X, i, C and the duration events B, E (paired into X rows by the shared passes) are rows */
static int is_row(int code) { return (code >= 0 && code <= 2) || code == 6 || code == 7; }

/* string value -> unescaped bytes (pointer into the input or into scratch) */
static const unsigned char *str_bytes(Ctx *c, const Val *v, size_t *n, Buf *scratch) {
    if (!v->flag) {
        *n = v->n;
        return v->p;
    }
    unescape(c, v->p, v->n, scratch);
    *n = scratch->len;
    return (const unsigned char *)scratch->p;
}

/* pid/tid -> (kind, value): 0 int, 1 string (interned code), 2 null/missing */
static void id_value(Ctx *c, const Val *v, int8_t *kind, int64_t *val) {
    if (v->kind == V_MISSING || v->kind == V_NULL || v->kind == V_NONF) {
        *kind = 2;
        *val = 0;
        return;
    }
    if (v->kind == V_NUM) {
        if (v->flag) bail(c, "non-integer pid/tid");
        int64_t x;
        if (num_int(&v->num, &x) || x <= -ID_LIMIT || x >= ID_LIMIT) bail(c, "pid/tid out of range");
        *kind = 0;
        *val = x;
        return;
    }
    if (v->kind == V_STR) {
        size_t n;
        const unsigned char *p = str_bytes(c, v, &n, &c->s->scratch);
        *kind = 1;
        *val = intern(c, (const char *)p, n);
        return;
    }
    bail(c, "pid/tid of an unsupported type");
}

static void check_id_type(Ctx *c, const Val *v) {
    if (v->kind == V_NUM) {
        int64_t x;
        if (v->flag) bail(c, "non-integer pid/tid");
        if (num_int(&v->num, &x) || x <= -ID_LIMIT || x >= ID_LIMIT) bail(c, "pid/tid out of range");
    } else if (v->kind != V_MISSING && v->kind != V_NULL && v->kind != V_NONF && v->kind != V_STR) {
        bail(c, "pid/tid of an unsupported type");
    }
}

/* ts/dur: returns 1 and sets *ns when valid */
static int time_value(Ctx *c, const Val *v, int64_t *ns) {
    *ns = 0;
    if (v->kind == V_MISSING || v->kind == V_NULL || v->kind == V_NONF) return 0;
    if (v->kind != V_NUM) bail(c, "ts/dur that is not a number");
    int r = num_scaled(&v->num, 3, ns);
    if (r != 0 || *ns >= TIME_LIMIT || *ns <= -TIME_LIMIT) bail(c, "ts/dur outside the exactly handled range");
    return 1;
}

/* int args value -> state (0 null/missing, 1 int, 2 Python) */
static void int_arg(Ctx *c, const Val *v, int8_t *st, int64_t *val) {
    *val = 0;
    switch (v->kind) {
    case V_MISSING: case V_NULL: case V_NONF:
        *st = 0;
        return;
    case V_NUM:
        if (v->flag) bail(c, "non-integer number in an integer args key");
        if (num_int(&v->num, val)) bail(c, "integer args value out of int64");
        *st = 1;
        return;
    case V_STR:
        *st = 2;
        return;
    default:
        bail(c, "args value of an unsupported type");
    }
}

static void put_str_col(Ctx *c, int off_idx, int data_idx, int ok_idx, const Val *v) {
    Buf *data = &c->s->b[data_idx];
    if (v->kind == V_STR) {
        if (!v->flag) {
            put_bytes(c, data, v->p, v->n);
        } else {
            unescape(c, v->p, v->n, &c->s->scratch);
            put_bytes(c, data, c->s->scratch.p, c->s->scratch.len);
        }
        NPUSH(c, ok_idx, uint8_t, 1);
    } else if (v->kind == V_MISSING || v->kind == V_NULL || v->kind == V_NONF) {
        NPUSH(c, ok_idx, uint8_t, 0);
    } else {
        bail(c, "cat/name of an unsupported type");
    }
    if (data->len > (size_t)INT32_MAX) bail(c, "string column over 2 GiB");
    NPUSH(c, off_idx, int32_t, (int32_t)data->len);
}

static int str_eq(Ctx *c, const Val *v, const char *lit) {
    if (v->kind != V_STR) return 0;
    size_t n;
    const unsigned char *p = str_bytes(c, v, &n, &c->s->scratch2);
    size_t m = strlen(lit);
    return n == m && memcmp(p, lit, m) == 0;
}

static const int ROW_FIXED[][2] = {
    {R_EID, 8}, {R_PH, 1}, {R_TS, 8}, {R_DUR, 8}, {R_DUROK, 1}, {R_PID, 8}, {R_PIDK, 1}, {R_TID, 8},
    {R_TIDK, 1}, {R_NAME_OFF, 4}, {R_NAME_OK, 1}, {R_CAT_OFF, 4}, {R_CAT_OK, 1}, {R_ARGS_OFF, 4},
    {R_ARGS_OK, 1}, {R_CORR, 8}, {R_CORR_ST, 1}, {R_EXT, 8}, {R_EXT_ST, 1}, {R_EXTL, 8}, {R_EXTL_ST, 1},
    {R_STREAM, 8}, {R_STREAM_ST, 1}, {R_DEV, 8}, {R_DEV_ST, 1}, {R_COLL, 1}};
static const int FLOW_FIXED[][2] = {{FL_KIND, 1}, {FL_TS, 8}, {FL_OK, 1}, {FL_ID, 8}, {FL_PID, 8},
                                    {FL_PIDK, 1}, {FL_TID, 8}, {FL_TIDK, 1}, {FL_ISF, 1}, {FL_BPE, 1}};

static void reserve_fixed(Ctx *c, const int (*cols)[2], size_t ncols, int64_t *room) {
    for (size_t i = 0; i < ncols; i++) reserve(c, &c->s->b[cols[i][0]], (size_t)cols[i][1] * ROOM);
    *room = ROOM;
}

static void commit_event(Ctx *c, Event *ev) {
    Scanner *s = c->s;
    int64_t eid = s->n_events;
    int code = phase_code(c, &ev->f_ph);
    int64_t ts;
    int ts_ok = time_value(c, &ev->f_ts, &ts);
    if (ev->f_ts.kind == V_NUM && ev->f_ts.flag) s->ts_float = 1;
    check_id_type(c, &ev->f_pid);
    check_id_type(c, &ev->f_tid);
    if (code < 0) s->n_unsupported++;
    if (is_row(code) && !ts_ok) { /* dropped and counted (missing, null or non-finite ts) */
        s->n_invalid_ts++;
        s->b[R_ARGS].len = ev->args_start;
        s->n_events++;
        return;
    }
    if (is_row(code)) {
        int8_t pk, tk;
        int64_t pv, tv;
        id_value(c, &ev->f_pid, &pk, &pv);
        id_value(c, &ev->f_tid, &tk, &tv);
        int64_t dur = 0;
        int dur_ok = 0;
        if (ev->f_dur.kind != V_MISSING && ev->f_dur.kind != V_NULL && ev->f_dur.kind != V_NONF &&
            ev->f_dur.kind != V_NUM)
            bail(c, "dur that is not a number");
        if (ev->f_dur.kind == V_NUM) dur_ok = time_value(c, &ev->f_dur, &dur);
        if (code != 0 || !dur_ok) {
            dur_ok = 0;
            dur = 0;
        }
        if (s->row_room <= 0) reserve_fixed(c, ROW_FIXED, sizeof(ROW_FIXED) / sizeof(ROW_FIXED[0]), &s->row_room);
        s->row_room--;
        NPUSH(c, R_EID, int64_t, eid);
        NPUSH(c, R_PH, int8_t, code);
        NPUSH(c, R_TS, int64_t, ts);
        NPUSH(c, R_DUR, int64_t, dur);
        NPUSH(c, R_DUROK, uint8_t, dur_ok);
        NPUSH(c, R_PID, int64_t, pv);
        NPUSH(c, R_PIDK, int8_t, pk);
        NPUSH(c, R_TID, int64_t, tv);
        NPUSH(c, R_TIDK, int8_t, tk);
        put_str_col(c, R_NAME_OFF, R_NAME, R_NAME_OK, &ev->f_name);
        put_str_col(c, R_CAT_OFF, R_CAT, R_CAT_OK, &ev->f_cat);
        /* args: text already in the heap */
        NPUSH(c, R_ARGS_OK, uint8_t, ev->has_args);
        if (s->b[R_ARGS].len > (size_t)INT32_MAX) bail(c, "args_json column over 2 GiB");
        NPUSH(c, R_ARGS_OFF, int32_t, (int32_t)s->b[R_ARGS].len);
        static const int slots[5] = {A_CORR, A_EXT, A_EXTL, A_STREAM, A_DEV};
        static const int cols[5][2] = {{R_CORR, R_CORR_ST}, {R_EXT, R_EXT_ST}, {R_EXTL, R_EXTL_ST},
                                       {R_STREAM, R_STREAM_ST}, {R_DEV, R_DEV_ST}};
        for (int i = 0; i < 5; i++) {
            int8_t st;
            int64_t val;
            int_arg(c, &ev->a[slots[i]], &st, &val);
            NPUSH(c, cols[i][0], int64_t, val);
            NPUSH(c, cols[i][1], int8_t, st);
        }
        NPUSH(c, R_COLL, uint8_t, ev->coll);
        s->n_rows++;
    } else {
        s->b[R_ARGS].len = ev->args_start; /* args text of non-rows is not kept */
        if (code == 3) {
            int which = str_eq(c, &ev->f_name, "process_name") ? 1 : str_eq(c, &ev->f_name, "thread_name") ? 2 : 0;
            if (ev->f_name.kind != V_STR && ev->f_name.kind != V_MISSING && ev->f_name.kind != V_NULL &&
                ev->f_name.kind != V_NONF)
                bail(c, "metadata name of an unsupported type");
            if (which && ev->a[A_NAME].kind == V_STR) {
                int8_t pk, tk;
                int64_t pv, tv;
                id_value(c, &ev->f_pid, &pk, &pv);
                id_value(c, &ev->f_tid, &tk, &tv);
                size_t n;
                const unsigned char *p = str_bytes(c, &ev->a[A_NAME], &n, &s->scratch);
                PyObject *nm = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)n, "strict");
                if (!nm) nomem(c);
                PyObject *t = Py_BuildValue("(iiLiLN)", which, (int)pk, (long long)pv, (int)tk, (long long)tv, nm);
                if (!t || PyList_Append(s->metas, t) < 0) {
                    Py_XDECREF(t);
                    nomem(c);
                }
                Py_DECREF(t);
            }
        } else if (code == 4 || code == 5) {
            int kind = 0;
            if (str_eq(c, &ev->f_cat, "ac2g") || str_eq(c, &ev->f_cat, "async_cpu_to_gpu")) kind = 1;
            else if (str_eq(c, &ev->f_cat, "async") && str_eq(c, &ev->f_name, "launch")) kind = 1;
            else if (str_eq(c, &ev->f_cat, "forward_backward") || str_eq(c, &ev->f_cat, "fwd_bwd") ||
                     str_eq(c, &ev->f_cat, "fwdbwd"))
                kind = 2;
            if (kind) {
                int8_t pk, tk;
                int64_t pv, tv;
                id_value(c, &ev->f_pid, &pk, &pv);
                id_value(c, &ev->f_tid, &tk, &tv);
                int64_t fid = 0;
                int fid_ok = 0;
                if (ev->f_id.kind == V_NUM) {
                    if (ev->f_id.flag) bail(c, "non-integer flow id");
                    if (num_int(&ev->f_id.num, &fid)) bail(c, "flow id out of int64");
                    fid_ok = 1;
                } else if (ev->f_id.kind != V_MISSING && ev->f_id.kind != V_NULL && ev->f_id.kind != V_NONF) {
                    bail(c, "flow id of an unsupported type");
                }
                if (ev->f_cat.kind != V_STR) bail(c, "flow cat of an unsupported type");
                if (s->flow_room <= 0)
                    reserve_fixed(c, FLOW_FIXED, sizeof(FLOW_FIXED) / sizeof(FLOW_FIXED[0]), &s->flow_room);
                s->flow_room--;
                NPUSH(c, FL_KIND, int8_t, kind);
                NPUSH(c, FL_TS, int64_t, ts);
                NPUSH(c, FL_OK, uint8_t, ts_ok && fid_ok);
                NPUSH(c, FL_ID, int64_t, fid);
                NPUSH(c, FL_PID, int64_t, pv);
                NPUSH(c, FL_PIDK, int8_t, pk);
                NPUSH(c, FL_TID, int64_t, tv);
                NPUSH(c, FL_TIDK, int8_t, tk);
                NPUSH(c, FL_ISF, uint8_t, code == 5);
                NPUSH(c, FL_BPE, uint8_t, str_eq(c, &ev->f_bp, "e"));
            }
        }
    }
    s->n_events++;
}

/* One event object at c->p ('{'). */
static void parse_event(Ctx *c) {
    Scanner *s = c->s;
    Event ev;
    ev.f_ph.kind = ev.f_cat.kind = ev.f_name.kind = ev.f_pid.kind = ev.f_tid.kind = V_MISSING;
    ev.f_ts.kind = ev.f_dur.kind = ev.f_id.kind = ev.f_bp.kind = V_MISSING;
    for (int i = 0; i < N_AKEYS; i++) ev.a[i].kind = V_MISSING;
    ev.has_args = 0;
    ev.coll = 0;
    ev.args_len = 0;
    ev.args_start = s->b[R_ARGS].len;
    if (s->max_depth < 0) limit(c, "depth");
    c->p++;
    skip_ws(c);
    if (*c->p != '}') {
        for (;;) {
            if (*c->p != '"') bail(c, "object key expected");
            size_t n;
            int esc;
            const unsigned char *k = scan_string(c, &n, &esc);
            skip_ws(c);
            if (*c->p != ':') bail(c, "':' expected");
            c->p++;
            skip_ws(c);
            const unsigned char *kt = key_text(c, k, &n, esc, &s->scratch);
            Val *dst = NULL;
            if (n == 2) {
                if (kt[0] == 'p' && kt[1] == 'h') dst = &ev.f_ph;
                else if (kt[0] == 't' && kt[1] == 's') dst = &ev.f_ts;
                else if (kt[0] == 'i' && kt[1] == 'd') dst = &ev.f_id;
                else if (kt[0] == 'b' && kt[1] == 'p') dst = &ev.f_bp;
            } else if (n == 3) {
                if (KEY_IS(kt, n, "cat")) dst = &ev.f_cat;
                else if (KEY_IS(kt, n, "pid")) dst = &ev.f_pid;
                else if (KEY_IS(kt, n, "tid")) dst = &ev.f_tid;
                else if (KEY_IS(kt, n, "dur")) dst = &ev.f_dur;
            } else if (n == 4) {
                if (KEY_IS(kt, n, "name")) dst = &ev.f_name;
                else if (KEY_IS(kt, n, "args")) {
                    if (ev.has_args) note_dup(c, k - 1);
                    parse_args(c, &ev);
                    goto next;
                }
            }
            if (dst) {
                if (dst->kind != V_MISSING) note_dup(c, k - 1);
                read_val(c, 1, dst);
            } else {
                value(c, 1, NULL);
            }
        next:
            skip_ws(c);
            if (*c->p == ',') {
                c->p++;
                skip_ws(c);
                continue;
            }
            if (*c->p == '}') break;
            bail(c, "',' or '}' expected");
        }
    }
    c->p++;
    commit_event(c, &ev);
}

/* ------------------------------------------------------------------ Python type */

static PyObject *scanner_scan(Scanner *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    int final;
    long long base_doc = 0;
    if (!PyArg_ParseTuple(args, "y*nnp|L", &view, &start, &end, &final, &base_doc)) return NULL;
    if (self->broken) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "scanner already bailed out");
        return NULL;
    }
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "bad range");
        return NULL;
    }
    Ctx c;
    c.s = self;
    c.final = final;
    g_reason = NULL;
    const unsigned char *base = (const unsigned char *)view.buf;
    c.base_ptr = base;
    c.base_off = (int64_t)base_doc;
    c.end = base + end;
    c.p = base + start;
    const unsigned char *volatile committed = c.p;
    volatile int saved_state = self->state;
    volatile size_t saved_args = self->b[R_ARGS].len;
    volatile int64_t saved_nf = self->n_nonfinite, saved_nc = self->n_ctrl, saved_first = self->first_repair;
    volatile int64_t saved_dup = self->n_dup;
    int status;
    int rc = setjmp(c.jb);
    if (rc == 0) {
        for (;;) {
            /* checkpoint */
            committed = c.p;
            saved_state = self->state;
            saved_args = self->b[R_ARGS].len;
            saved_nf = self->n_nonfinite;
            saved_nc = self->n_ctrl;
            saved_first = self->first_repair;
            saved_dup = self->n_dup;
            skip_ws(&c);
            unsigned ch = *c.p;
            if (self->state == 2) {
                if (ch == ',') {
                    c.p++;
                    self->state = 1;
                    continue;
                }
                if (ch == ']') {
                    c.p++;
                    status = 1;
                    break;
                }
                bail(&c, "',' or ']' expected in traceEvents");
            }
            if (ch == ']' && self->state == 0) {
                c.p++;
                status = 1;
                break;
            }
            if (ch != '{') bail(&c, "traceEvents element that is not an object");
            parse_event(&c);
            self->state = 2;
        }
        PyBuffer_Release(&view);
        return Py_BuildValue("(ins)", status, (Py_ssize_t)(c.p - base), "");
    }
    /* Roll back to the last complete event. Only parsing runs out of input (commit_event reads
     * nothing), and parsing writes only the args heap; a bail or out-of-memory ends the scanner. */
    self->state = saved_state;
    self->b[R_ARGS].len = saved_args;
    self->n_nonfinite = saved_nf;
    self->n_ctrl = saved_nc;
    self->first_repair = saved_first;
    self->n_dup = saved_dup; /* the offsets past it are rewritten when the event is scanned again */
    Py_ssize_t pos = (Py_ssize_t)((const unsigned char *)committed - base);
    PyBuffer_Release(&view);
    if (rc == JMP_NOMEM) {
        self->broken = 1;
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    if (rc == JMP_INCOMPLETE) return Py_BuildValue("(ins)", 0, pos, "");
    self->broken = 1;
    return Py_BuildValue("(ins)", rc == JMP_LIMIT ? 3 : 2, pos, g_reason ? g_reason : "unknown");
}

/* Owned memory exposed through the buffer protocol (zero-copy hand-over to numpy/Arrow). */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t len;
    size_t cap;
    int mapped;
} Owned;

static int owned_getbuffer(Owned *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p ? self->p : (char *)"", self->len, 1, flags);
}

static void owned_dealloc(Owned *self) {
    buf_free(self->p, self->cap, self->mapped);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs owned_as_buffer = {(getbufferproc)owned_getbuffer, NULL};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_kineto_scan.Owned",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory owned by the scanner's results (read-only buffer).",
};

static PyObject *scanner_result(Scanner *self, PyObject *noargs) {
    (void)noargs;
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int i = 0; i < N_BUFS; i++) {
        Owned *o = PyObject_New(Owned, &OwnedType);
        if (!o) {
            Py_DECREF(d);
            return NULL;
        }
        o->p = self->b[i].p;
        o->len = (Py_ssize_t)self->b[i].len;
        o->cap = self->b[i].cap;
        o->mapped = self->b[i].mapped;
        self->b[i].p = NULL;
        self->b[i].len = self->b[i].cap = 0;
        self->b[i].mapped = 0;
        if (PyDict_SetItemString(d, BUF_NAMES[i], (PyObject *)o) < 0) {
            Py_DECREF(o);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(o);
    }
    self->broken = 1; /* buffers handed over */
    PyObject *v;
#define SETI(key, val)                                                       \
    v = PyLong_FromLongLong((long long)(val));                               \
    if (!v || PyDict_SetItemString(d, key, v) < 0) {                         \
        Py_XDECREF(v);                                                       \
        Py_DECREF(d);                                                        \
        return NULL;                                                         \
    }                                                                        \
    Py_DECREF(v);
    SETI("n_events", self->n_events);
    SETI("n_rows", self->n_rows);
    SETI("n_unsupported", self->n_unsupported);
    SETI("ts_float", self->ts_float);
    SETI("n_ids", self->n_ids);
    SETI("n_nonfinite", self->n_nonfinite);
    SETI("n_ctrl", self->n_ctrl);
    SETI("first_repair", self->first_repair);
    SETI("n_invalid_ts", self->n_invalid_ts);
    SETI("n_dup", self->n_dup);
#undef SETI
    {
        Py_ssize_t nd = self->n_dup < DUP_OFFSETS ? (Py_ssize_t)self->n_dup : DUP_OFFSETS;
        PyObject *offs = PyList_New(nd);
        if (!offs) {
            Py_DECREF(d);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < nd; i++) {
            PyObject *o = PyLong_FromLongLong((long long)self->dup_off[i]);
            if (!o) {
                Py_DECREF(offs);
                Py_DECREF(d);
                return NULL;
            }
            PyList_SET_ITEM(offs, i, o);
        }
        int rc = PyDict_SetItemString(d, "dup_off", offs);
        Py_DECREF(offs);
        if (rc < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    if (PyDict_SetItemString(d, "metas", self->metas) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static int scanner_init(Scanner *self, PyObject *args, PyObject *kw) {
    int compact = 1;
    static char *kwlist[] = {"compact_args", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist, &compact)) return -1;
    self->compact = compact;
    self->max_depth = DEFAULT_MAX_DEPTH;
    self->max_string = (int64_t)64 << 20;
    self->first_repair = -1;
    self->metas = PyList_New(0);
    if (!self->metas) return -1;
    /* offsets start with 0 */
    int offs[4] = {R_NAME_OFF, R_CAT_OFF, R_ARGS_OFF, I_OFF};
    for (int i = 0; i < 4; i++) { /* offsets start with 0: int32 for the row strings, int64 for ids */
        Buf *b = &self->b[offs[i]];
        if (buf_grow(b, 8) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        *(int64_t *)b->p = 0;
        b->len = offs[i] == I_OFF ? 8 : 4;
    }
    return 0;
}

static void scanner_dealloc(Scanner *self) {
    for (int i = 0; i < N_BUFS; i++) buf_free(self->b[i].p, self->b[i].cap, self->b[i].mapped);
    buf_free(self->scratch.p, self->scratch.cap, self->scratch.mapped);
    buf_free(self->scratch2.p, self->scratch2.cap, self->scratch2.mapped);
    free(self->htab);
    Py_XDECREF(self->metas);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *scanner_set_limits(Scanner *self, PyObject *args) {
    long long depth, string;
    if (!PyArg_ParseTuple(args, "LL", &depth, &string)) return NULL;
    self->max_depth = depth;
    self->max_string = string;
    Py_RETURN_NONE;
}

static PyMethodDef scanner_methods[] = {
    {"scan", (PyCFunction)scanner_scan, METH_VARARGS,
     "scan(buffer, start, end, final, base=0) -> (status, pos, reason): 0 need more, 1 done, 2 bail, 3 limit."},
    {"set_limits", (PyCFunction)scanner_set_limits, METH_VARARGS,
     "set_limits(max_depth, max_string): nesting below an event object, bytes of one string."},
    {"result", (PyCFunction)scanner_result, METH_NOARGS, "Hand over the accumulated columns (dict)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_kineto_scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Incremental scanner of a traceEvents array (see module doc).",
    .tp_methods = scanner_methods,
    .tp_init = (initproc)scanner_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_kineto_scan",
    "Native scanner of Kineto traceEvents (see jobs/normalize/kineto/native.py).", -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kineto_scan(void) {
    init_tables();
    if (PyType_Ready(&ScannerType) < 0 || PyType_Ready(&OwnedType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "NEED_MORE", 0);
    PyModule_AddIntConstant(m, "DONE", 1);
    PyModule_AddIntConstant(m, "BAIL", 2);
    PyModule_AddIntConstant(m, "LIMIT", 3);
    PyModule_AddIntConstant(m, "ABI", 5);
    return m;
}
