/* unwind.c - call stacks read from the unwind tables without libgcc: the
 * heap profile's capture (profile_stack.c chooses between this walk and
 * libgcc's, and falls back to libgcc where this one cannot go).
 *
 * libgcc's _Unwind_Backtrace costs about 0.3 us a frame: for every frame it
 * finds the object, searches its .eh_frame_hdr, parses the CIE and the FDE,
 * runs the whole CFA program for every register and builds a full register
 * context.  A sampled allocation's stack is mostly the same few hundred
 * return addresses over and over, and on x86-64 a frame needs three facts
 * to step to its caller: where the CFA is (rsp or rbp plus an offset),
 * where the return address is saved (CFA - 8) and where rbp is saved, if
 * the function saved it.  So:
 *
 *   - the first time an address is seen, its rule is derived from the
 *     object's tables (_dl_find_object: lock-free, no malloc; the binary
 *     search table of .eh_frame_hdr; the CIE's and FDE's CFA programs, run
 *     up to that address, tracking only the CFA, rbp and the return
 *     address);
 *   - the rule is packed with the address in one 64-bit word and kept in a
 *     direct-mapped table of static memory (SF_UNWIND_CACHE entries): a
 *     later frame at the same address costs a hash, a load, a compare and
 *     the two or three loads of the step itself.  One word per entry, so
 *     readers and writers need no lock: a torn entry cannot exist, and two
 *     threads filling the same slot both write a true rule;
 *   - the table is forgotten when an object is unloaded (dlclose, seen by
 *     the interposed dlclose in override_dl.c: another object may be loaded at
 *     the same addresses); entries carry the generation they were made in,
 *     so a rule derived while dlclose ran is not believed after it.  (glibc
 *     unloads iconv's and NSS's modules itself, by __libc_dlclose, which
 *     this does not see: a rule could outlive such a module and be met
 *     again only at the very address of a malloc call of whatever is
 *     loaded there next; check mode would show it.)  The
 *     static library and a build without the standard names (sanitizer
 *     builds) cannot see dlclose, and keep no rules: every frame is derived
 *     from the tables there.
 *
 * What a rule cannot describe makes the walk give up and the caller take
 * libgcc's walk for the whole stack: a CFA on another register or given by
 * an expression (stack realignment in some main()s, PLT stubs), signal
 * frames (the 'S' augmentation of __restore_rt), a return address or rbp
 * kept in a register or by an expression, an address in no loaded object
 * (JIT code that libgcc may know through __register_frame), and tables in
 * another encoding than the usual one.  libgcc stays the reference: the
 * profile's "check" mode runs both and reports where they differ
 * (docs/design.md, "Heap profiling").
 *
 * Nothing here allocates, locks or makes a system call; it reads only the
 * calling thread's stack and the loaded objects' tables. */
#include "profile.h"

#if defined(__x86_64__)

#include <link.h>

/* DWARF register numbers (x86-64 psABI) */
enum { REG_RBP = 6, REG_RSP = 7, REG_RA = 16 };

/* How a register of the caller is found (only rbp and the return address
 * are tracked; the other registers' rules are read and ignored). */
enum how { HOW_SAME, HOW_OFFSET, HOW_UNDEFINED, HOW_OTHER };

typedef struct {
    uint8_t cfa_reg;   /* REG_RSP or REG_RBP (anything else: not describable) */
    int64_t cfa_off;   /* CFA = cfa_reg + cfa_off */
    uint8_t rbp_how, ra_how;
    int64_t rbp_off, ra_off; /* saved at CFA + off (HOW_OFFSET) */
} cfa_row_t;

/* The outcome of deriving an address's rule. */
enum rule_kind {
    RULE_STEP, /* the row says how to reach the caller */
    RULE_END,  /* the outermost frame: its return address is undefined, or
                  its object has no FDE for it (libgcc ends there too) */
    RULE_GIVE_UP /* not describable here: libgcc's walk instead */
};

/* ---- reading the tables ----------------------------------------------------- */

static uint64_t uleb(const uint8_t **pp, const uint8_t *end) {
    uint64_t v = 0;
    unsigned shift = 0;
    const uint8_t *p = *pp;
    while (p < end) {
        uint8_t b = *p++;
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) break;
    }
    *pp = p;
    return v;
}

static int64_t sleb(const uint8_t **pp, const uint8_t *end) {
    uint64_t v = 0;
    unsigned shift = 0;
    uint8_t b = 0;
    const uint8_t *p = *pp;
    while (p < end) {
        b = *p++;
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) break;
    }
    if (shift < 64 && (b & 0x40)) v |= ~(uint64_t)0 << shift;
    *pp = p;
    return (int64_t)v;
}

/* n little-endian bytes (1, 2, 4 or 8: this file is x86-64's only),
 * sign-extended with `sign`; false past end. */
static bool read_fixed(const uint8_t **pp, const uint8_t *end, unsigned n, bool sign, uint64_t *v) {
    if ((size_t)(end - *pp) < n) return false;
    uint64_t x = 0;
    memcpy(&x, *pp, n);
    if (sign && n < 8 && ((x >> (8 * n - 1)) & 1)) x |= ~(uint64_t)0 << (8 * n);
    *pp += n;
    *v = x;
    return true;
}

#define DW_EH_PE_omit 0xff
#define DW_EH_PE_indirect 0x80

/* A pointer in the DW_EH_PE encoding `enc`; `datarel` is the base of
 * data-relative values (.eh_frame_hdr's start).  With `value_only` the
 * application part (pc-relative...) is left out, as for an FDE's range.
 * False on an encoding this reader does not know. */
static bool read_encoded(const uint8_t **pp, const uint8_t *end, uint8_t enc, uintptr_t datarel, bool value_only,
                         uintptr_t *out) {
    const uint8_t *p = *pp;
    uintptr_t base = 0;
    uint64_t v;
    if (enc == DW_EH_PE_omit) {
        *out = 0;
        return true;
    }
    if (!value_only) {
        switch (enc & 0x70) {
        case 0x00: base = 0; break;
        case 0x10: base = (uintptr_t)p; break; /* pcrel */
        case 0x30: base = datarel; break;      /* datarel */
        default: return false;                 /* textrel, funcrel, aligned: not on x86-64 Linux */
        }
    }
    unsigned format = enc & 0x0f; /* (bit 3: signed) */
    bool ok = true;
    switch (format) {
    case 0x01: v = uleb(&p, end); break;
    case 0x09: v = (uint64_t)sleb(&p, end); break;
    case 0x00: case 0x04: case 0x0c: ok = read_fixed(&p, end, 8, false, &v); break; /* (0: absptr) */
    case 0x02: case 0x0a: ok = read_fixed(&p, end, 2, format & 8, &v); break;
    case 0x03: case 0x0b: ok = read_fixed(&p, end, 4, format & 8, &v); break;
    default: return false;
    }
    if (!ok) return false;
    uintptr_t r = base + (uintptr_t)v;
    if (!value_only && (enc & DW_EH_PE_indirect)) memcpy(&r, (const void *)r, sizeof r);
    *pp = p;
    *out = r;
    return true;
}

/* One length-prefixed record of .eh_frame (a CIE or an FDE): its contents
 * after the length field, [*body, *end).  False for a terminator or a
 * 64-bit record (which GNU tools never write for x86-64 code). */
static bool record_at(const uint8_t *rec, const uint8_t **body, const uint8_t **end) {
    uint32_t len;
    memcpy(&len, rec, 4);
    if (len == 0 || len == 0xffffffffu) return false;
    *body = rec + 4;
    *end = rec + 4 + len;
    return true;
}

typedef struct {
    uint64_t code_align;
    int64_t data_align;
    uint8_t fde_enc;
    bool has_aug_data; /* 'z' */
    const uint8_t *insns, *end;
} cie_t;

static bool parse_cie(const uint8_t *rec, cie_t *c) {
    const uint8_t *p, *end;
    if (!record_at(rec, &p, &end) || end - p < 5) return false;
    uint32_t id;
    memcpy(&id, p, 4);
    p += 4;
    if (id != 0) return false; /* not a CIE */
    uint8_t version = *p++;
    if (version != 1 && version != 3) return false;
    const char *aug = (const char *)p;
    while (p < end && *p) p++;
    if (p >= end) return false;
    p++;
    c->code_align = uleb(&p, end);
    c->data_align = sleb(&p, end);
    uint64_t ra_reg = version == 1 ? (uint64_t)*p++ : uleb(&p, end);
    if (ra_reg != REG_RA) return false;
    c->fde_enc = 0; /* absptr */
    c->has_aug_data = aug[0] == 'z';
    if (c->has_aug_data) {
        uint64_t len = uleb(&p, end);
        const uint8_t *data = p, *data_end = p + len;
        if (data_end > end) return false;
        for (const char *a = aug + 1; *a; a++) {
            switch (*a) {
            case 'R': c->fde_enc = *data++; break;
            case 'L': data++; break; /* LSDA encoding */
            case 'P': {              /* personality: encoding, then the pointer */
                uint8_t penc = *data++;
                uintptr_t ignored;
                if (!read_encoded(&data, data_end, penc & (uint8_t)~DW_EH_PE_indirect, 0, false, &ignored))
                    return false;
                break;
            }
            default: return false; /* 'S' (signal frames) and what is not x86-64's */
            }
        }
        p = data_end;
    } else if (aug[0] != '\0') {
        return false;
    }
    c->insns = p;
    c->end = end;
    return true;
}

/* ---- running the CFA program -------------------------------------------- */

#define CFA_STATE_STACK 8

typedef struct {
    cfa_row_t row, initial;
    cfa_row_t saved[CFA_STATE_STACK];
    unsigned nsaved;
} cfa_run_t;

static void set_reg(cfa_row_t *r, uint64_t reg, uint8_t how, int64_t off) {
    if (reg == REG_RBP) {
        r->rbp_how = how;
        r->rbp_off = off;
    } else if (reg == REG_RA) {
        r->ra_how = how;
        r->ra_off = off;
    }
}

static void restore_reg(cfa_run_t *s, uint64_t reg) {
    if (reg == REG_RBP) {
        s->row.rbp_how = s->initial.rbp_how;
        s->row.rbp_off = s->initial.rbp_off;
    } else if (reg == REG_RA) {
        s->row.ra_how = s->initial.ra_how;
        s->row.ra_off = s->initial.ra_off;
    }
}

/* Runs the instructions [p, end) from location *loc while the location
 * stays at or below `target`.  False on an instruction this walk cannot
 * follow (an expression for the CFA, a state stack too deep...). */
static bool run_cfa(cfa_run_t *s, const cie_t *c, const uint8_t *p, const uint8_t *end, uintptr_t *loc,
                    uintptr_t target) {
    while (p < end) {
        uint8_t op = *p++;
        uint64_t reg, delta;
        switch (op >> 6) {
        case 1: /* advance_loc */
            *loc += (op & 0x3f) * c->code_align;
            if (*loc > target) return true;
            continue;
        case 2: /* offset */
            set_reg(&s->row, op & 0x3f, HOW_OFFSET, (int64_t)uleb(&p, end) * c->data_align);
            continue;
        case 3: /* restore */
            restore_reg(s, op & 0x3f);
            continue;
        }
        switch (op) {
        case 0x00: break; /* nop */
        case 0x01: {      /* set_loc */
            uintptr_t a;
            if (!read_encoded(&p, end, c->fde_enc, 0, false, &a)) return false;
            *loc = a;
            if (*loc > target) return true;
            break;
        }
        case 0x02: case 0x03: case 0x04: /* advance_loc1, 2, 4 */
            if (!read_fixed(&p, end, 1u << (op - 0x02), false, &delta)) return false;
            *loc += delta * c->code_align;
            if (*loc > target) return true;
            break;
        case 0x05: /* offset_extended */
            reg = uleb(&p, end);
            set_reg(&s->row, reg, HOW_OFFSET, (int64_t)uleb(&p, end) * c->data_align);
            break;
        case 0x06: /* restore_extended */
            restore_reg(s, uleb(&p, end));
            break;
        case 0x07: /* undefined */
            set_reg(&s->row, uleb(&p, end), HOW_UNDEFINED, 0);
            break;
        case 0x08: /* same_value */
            set_reg(&s->row, uleb(&p, end), HOW_SAME, 0);
            break;
        case 0x09: /* register */
        case 0x14: /* val_offset */
        case 0x15: /* val_offset_sf (the second operand skipped: a LEB128 either way) */
            reg = uleb(&p, end);
            (void)uleb(&p, end);
            set_reg(&s->row, reg, HOW_OTHER, 0);
            break;
        case 0x0a: /* remember_state */
            if (s->nsaved == CFA_STATE_STACK) return false;
            s->saved[s->nsaved++] = s->row;
            break;
        case 0x0b: /* restore_state: the CFA rule is restored too (as libgcc does) */
            if (s->nsaved == 0) return false;
            s->row = s->saved[--s->nsaved];
            break;
        case 0x0c: /* def_cfa */
            s->row.cfa_reg = (uint8_t)uleb(&p, end);
            s->row.cfa_off = (int64_t)uleb(&p, end);
            break;
        case 0x0d: /* def_cfa_register */
            s->row.cfa_reg = (uint8_t)uleb(&p, end);
            break;
        case 0x0e: /* def_cfa_offset */
            s->row.cfa_off = (int64_t)uleb(&p, end);
            break;
        case 0x0f: /* def_cfa_expression */
            return false;
        case 0x10: /* expression */
        case 0x16: /* val_expression */
            reg = uleb(&p, end);
            delta = uleb(&p, end); /* the expression's length: skipped */
            p += delta;
            set_reg(&s->row, reg, HOW_OTHER, 0);
            break;
        case 0x11: /* offset_extended_sf */
            reg = uleb(&p, end);
            set_reg(&s->row, reg, HOW_OFFSET, sleb(&p, end) * c->data_align);
            break;
        case 0x12: /* def_cfa_sf */
            s->row.cfa_reg = (uint8_t)uleb(&p, end);
            s->row.cfa_off = sleb(&p, end) * c->data_align;
            break;
        case 0x13: /* def_cfa_offset_sf */
            s->row.cfa_off = sleb(&p, end) * c->data_align;
            break;
        case 0x2e: /* GNU_args_size */
            (void)uleb(&p, end);
            break;
        case 0x2f: /* GNU_negative_offset_extended */
            reg = uleb(&p, end);
            set_reg(&s->row, reg, HOW_OFFSET, -(int64_t)uleb(&p, end) * c->data_align);
            break;
        default: return false; /* DW_CFA_GNU_window_save and what is not x86-64's */
        }
    }
    return true;
}

/* The rule at address `pc`: the object's FDE, found through its
 * .eh_frame_hdr's search table, its CIE's initial instructions, then its
 * own up to pc. */
static enum rule_kind derive(uintptr_t pc, cfa_row_t *row) {
    struct dl_find_object dlfo;
    if (_dl_find_object((void *)pc, &dlfo) != 0) return RULE_GIVE_UP; /* no object: JIT code? */
    const uint8_t *hdr = dlfo.dlfo_eh_frame;
    if (hdr == NULL) return RULE_END; /* an object without tables: libgcc ends there */
    /* version 1, then the encodings of eh_frame_ptr, fde_count and the
     * table; the search table is what lld and ld write: datarel sdata4 */
    if (hdr[0] != 1 || hdr[3] != 0x3b) return RULE_GIVE_UP;
    const uint8_t *p = hdr + 4, *far = hdr + 4 + 16;
    uintptr_t eh_frame, count;
    if (!read_encoded(&p, far, hdr[1], (uintptr_t)hdr, false, &eh_frame) ||
        !read_encoded(&p, far, hdr[2], (uintptr_t)hdr, false, &count))
        return RULE_GIVE_UP;
    (void)eh_frame;
    if (hdr[2] == DW_EH_PE_omit || count == 0) return RULE_GIVE_UP; /* no table: libgcc searches */
    const int32_t *table = (const int32_t *)(const void *)p; /* pairs: initial location, FDE */
    intptr_t rel = (intptr_t)(pc - (uintptr_t)hdr);
    size_t lo = 0, hi = count;
    while (hi - lo > 1) { /* the last entry whose start is at or below pc */
        size_t mid = lo + (hi - lo) / 2;
        if ((intptr_t)table[2 * mid] <= rel) lo = mid;
        else hi = mid;
    }
    if ((intptr_t)table[2 * lo] > rel) return RULE_END;
    const uint8_t *fde = hdr + table[2 * lo + 1];
    const uint8_t *fp, *fend;
    if (!record_at(fde, &fp, &fend)) return RULE_GIVE_UP;
    uint32_t cie_off;
    memcpy(&cie_off, fp, 4);
    if (cie_off == 0) return RULE_GIVE_UP; /* a CIE where an FDE should be */
    cie_t cie;
    if (!parse_cie(fp - cie_off, &cie)) return RULE_GIVE_UP;
    fp += 4;
    uintptr_t start, range;
    if (!read_encoded(&fp, fend, cie.fde_enc, 0, false, &start) ||
        !read_encoded(&fp, fend, cie.fde_enc & 0x0f, 0, true, &range))
        return RULE_GIVE_UP;
    if (pc < start || pc >= start + range) return RULE_END; /* a gap between FDEs */
    if (cie.has_aug_data) {
        uint64_t skip = uleb(&fp, fend);
        fp += skip;
    }

    cfa_run_t s;
    memset(&s, 0, sizeof s);
    s.row.cfa_reg = 0xff;
    uintptr_t loc = start;
    if (!run_cfa(&s, &cie, cie.insns, cie.end, &loc, UINTPTR_MAX)) return RULE_GIVE_UP;
    s.initial = s.row;
    loc = start;
    if (!run_cfa(&s, &cie, fp, fend, &loc, pc)) return RULE_GIVE_UP;
    *row = s.row;
    if (row->ra_how == HOW_UNDEFINED) return RULE_END;
    if (row->cfa_reg != REG_RSP && row->cfa_reg != REG_RBP) return RULE_GIVE_UP;
    if (row->ra_how != HOW_OFFSET || (row->rbp_how != HOW_SAME && row->rbp_how != HOW_OFFSET)) return RULE_GIVE_UP;
    return RULE_STEP;
}

/* ---- the rule cache ------------------------------------------------------ */

/* One 64-bit word per entry:
 *   bits  0-33  tag: pc >> SF_UNWIND_CACHE_BITS (user addresses have 47 bits)
 *   bit  34     the CFA is rbp + offset (else rsp + offset)
 *   bits 35-48  CFA offset / 8
 *   bits 49-53  rbp saved at CFA - 8 x this (0: not saved, unchanged)
 *   bit  54     the outermost frame (return address undefined)
 *   bits 55-58  generation (the dlclose count, mod 16)
 *   bit  63     valid
 * The return address is at CFA - 8 in every cached rule.  The slot is
 * (pc ^ tag) mod the table size, so tag and slot give back pc. */
#define SF_UNWIND_CACHE_BITS 13
#define SF_UNWIND_CACHE (1u << SF_UNWIND_CACHE_BITS)
#define TAG_BITS 34
#define TAG_MASK ((UINT64_C(1) << TAG_BITS) - 1)

static uint64_t rule_cache[SF_UNWIND_CACHE];
static unsigned unwind_gen;
bool sf_unwind_sees_dlclose; /* set by override_dl.c's constructor */

static inline size_t slot_of(uintptr_t pc) {
    return (size_t)((pc ^ (pc >> SF_UNWIND_CACHE_BITS)) & (SF_UNWIND_CACHE - 1));
}

/* A packed rule for the cache, or 0 when the rule does not fit the format
 * (it is then derived again each time: rare). */
static uint64_t pack(uintptr_t pc, const cfa_row_t *r, bool end, unsigned gen) {
    if (pc >> (TAG_BITS + SF_UNWIND_CACHE_BITS)) return 0; /* (past 47 bits the tag would not hold it) */
    uint64_t w = (UINT64_C(1) << 63) | ((uint64_t)(gen & 15) << 55) | ((uint64_t)(pc >> SF_UNWIND_CACHE_BITS) & TAG_MASK);
    if (end) return w | (UINT64_C(1) << 54);
    if (r->cfa_off <= 0 || r->cfa_off % 8 || r->cfa_off / 8 >= (1 << 14) || r->ra_off != -8) return 0;
    w |= (uint64_t)(r->cfa_reg == REG_RBP) << 34 | (uint64_t)(r->cfa_off / 8) << 35;
    if (r->rbp_how == HOW_OFFSET) {
        if (r->rbp_off >= 0 || r->rbp_off % 8 || -r->rbp_off / 8 >= 32) return 0;
        w |= (uint64_t)(-r->rbp_off / 8) << 49;
    }
    return w;
}

static void unpack(uint64_t w, cfa_row_t *r) {
    r->cfa_reg = (w >> 34) & 1 ? REG_RBP : REG_RSP;
    r->cfa_off = (int64_t)((w >> 35) & 0x3fff) * 8;
    r->ra_how = HOW_OFFSET;
    r->ra_off = -8;
    unsigned k = (unsigned)(w >> 49) & 31;
    r->rbp_how = k ? HOW_OFFSET : HOW_SAME;
    r->rbp_off = -(int64_t)k * 8;
}

static enum rule_kind rule_at(uintptr_t pc, cfa_row_t *row, unsigned gen) {
    uint64_t *slot = &rule_cache[slot_of(pc)];
    uint64_t w = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if ((w >> 63) && (w & TAG_MASK) == ((pc >> SF_UNWIND_CACHE_BITS) & TAG_MASK) && ((w >> 55) & 15) == (gen & 15)) {
        if ((w >> 54) & 1) return RULE_END;
        unpack(w, row);
        return RULE_STEP;
    }
    enum rule_kind k = derive(pc, row);
    if (k != RULE_GIVE_UP && __atomic_load_n(&sf_unwind_sees_dlclose, __ATOMIC_ACQUIRE)) {
        /* (an END for want of an FDE is kept too: it is as final) */
        uint64_t packed = pack(pc, row, k == RULE_END, gen);
        if (packed) __atomic_store_n(slot, packed, __ATOMIC_RELAXED);
    }
    return k;
}

void sf_unwind_forget(void) {
    __atomic_fetch_add(&unwind_gen, 1, __ATOMIC_SEQ_CST);
    for (size_t i = 0; i < SF_UNWIND_CACHE; i++) __atomic_store_n(&rule_cache[i], 0, __ATOMIC_RELAXED);
}

/* ---- the walk ------------------------------------------------------------ */

__attribute__((no_sanitize("address"))) SF_NOINLINE int sf_unwind_table(uintptr_t *out, unsigned max, uintptr_t skip_lo, uintptr_t skip_hi) {
    uintptr_t pc, sp, bp;
    /* this function's own frame, at the instruction after the lea: the
     * rules there are those of every instruction of the block */
    __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(pc), "=r"(sp), "=r"(bp));
    unsigned gen = __atomic_load_n(&unwind_gen, __ATOMIC_ACQUIRE);
    unsigned n = 0;
    bool top = true;
    /* The first frame is this function's, looked up at pc itself; every
     * caller's at its return address minus one (the call instruction). */
    uintptr_t at = pc;
    for (;;) {
        cfa_row_t r;
        enum rule_kind k = rule_at(at, &r, gen);
        if (k == RULE_GIVE_UP) return -1;
        if (k == RULE_END) return (int)n;
        uintptr_t cfa = (r.cfa_reg == REG_RSP ? sp : bp) + (uintptr_t)r.cfa_off;
        if (cfa < sp + 8) return -1; /* a caller's frame is above its callee's: the rule is wrong */
        uintptr_t ra;
        memcpy(&ra, (const void *)(cfa + (uintptr_t)r.ra_off), sizeof ra);
        if (r.rbp_how == HOW_OFFSET) memcpy(&bp, (const void *)(cfa + (uintptr_t)r.rbp_off), sizeof bp);
        sp = cfa;
        pc = ra;
        if (pc == 0) return (int)n;
        if (!(top && pc >= skip_lo && pc < skip_hi)) {
            top = false;
            out[n++] = pc - 1;
            if (n == max) return (int)n;
        }
        at = pc - 1;
    }
}

#else /* not x86-64: libgcc's walk only */

bool sf_unwind_sees_dlclose;

void sf_unwind_forget(void) {}
int sf_unwind_table(uintptr_t *out, unsigned max, uintptr_t skip_lo, uintptr_t skip_hi) {
    (void)out, (void)max, (void)skip_lo, (void)skip_hi;
    return -1;
}

#endif
