/* config.c - sefer_config_get, _set, _error and _source: the knobs at run
 * time, by name (docs/api.md, "Knobs").
 *
 * A value is checked against the knob table (knob_table.c) before it is
 * stored (knobs.c); a knob that cannot change while the program runs is
 * refused with the variable or file key that sets it.  A change is an event
 * (/events), and a change of profile.sample_bytes tells the profiler. */
#include "internal.h"

/* Why this thread's last sefer_config_* call failed. */
static __thread char config_error[256];

static int fail(int err, const char *name, const char *msg) {
    sf_str_t s;
    sf_str_init(&s, config_error, sizeof config_error);
    if (name) sf_str_add_clean(&s, name, strlen(name), 96);
    else sf_str_add(&s, "(null)");
    sf_str_add(&s, ": ");
    sf_str_add(&s, msg);
    errno = err;
    return -1;
}

static int format_value(int i, char *buf, size_t len) {
    const struct sf_knob_def *d = &sf_knob_defs[i];
    uint64_t v = sf_knob((enum sf_knob_id)i);
    char tmp[48];
    sf_str_t s;
    sf_str_init(&s, tmp, sizeof tmp);
    const char *text = tmp;
    if (d->type == SF_KNOB_STRING) {
        text = sf_knob_string(i);
    } else if (d->type == SF_KNOB_ENUM) {
        text = d->choices[v];
    } else if (d->type == SF_KNOB_BOOL) {
        text = v ? "true" : "false";
    } else if (d->type == SF_KNOB_SIZE && v == SF_KNOB_AUTO) {
        text = "auto";
    } else {
        sf_str_addu(&s, v);
        if (d->type == SF_KNOB_MS) sf_str_add(&s, "ms");
    }
    size_t n = strlen(text);
    if (buf == NULL || n + 1 > len) {
        char msg[64];
        sf_str_init(&s, msg, sizeof msg);
        sf_str_add(&s, "buffer too small (the value needs ");
        sf_str_addu(&s, n + 1);
        sf_str_add(&s, " bytes)");
        return fail(ERANGE, d->name, msg);
    }
    memcpy(buf, text, n + 1);
    return 0;
}

SEFER_EXPORT int sefer_config_get(const char *name, char *buf, size_t len) {
    sf_ensure_init();
    int i = name ? sf_knob_lookup(name, strlen(name)) : -1;
    if (i < 0) return fail(ENOENT, name, "unknown knob");
    sf_lock(&sf_knob_lock);
    int rc = format_value(i, buf, len);
    sf_unlock(&sf_knob_lock);
    return rc;
}

SEFER_EXPORT int sefer_config_set(const char *name, const char *value) {
    sf_ensure_init();
    int i = name ? sf_knob_lookup(name, strlen(name)) : -1;
    if (i < 0) return fail(ENOENT, name, "unknown knob");
    if (!sf_knob_defs[i].runtime) {
        char msg[160], var[64];
        sf_knob_env_name(i, var, sizeof var);
        sf_str_t s;
        sf_str_init(&s, msg, sizeof msg);
        sf_str_add(&s, "cannot change while the program runs (set it in the SEFER_CONFIG file or ");
        sf_str_add(&s, var);
        sf_str_add(&s, ")");
        return fail(EPERM, name, msg);
    }
    char why[160];
    uint64_t v = 0;
    if (!sf_knob_from_text(i, value, &v, why, sizeof why)) return fail(EINVAL, name, why);
    /* stacks wanted from now on: libgcc's walk there first (it is loaded
     * only when asked for: profile_stack.c) */
    if ((i == SF_KNOB_PROFILE_SAMPLE_BYTES && v != 0) || (i == SF_KNOB_PROFILE_UNWINDER && v != SF_UNWINDER_TABLE))
        sf_prof_libgcc_load();
    sf_lock(&sf_knob_lock);
    uint64_t old = sf_knob((enum sf_knob_id)i);
    uint8_t old_source = sf_knob_source(i);
    sf_knob_set(i, v, value, SF_SRC_RUNTIME);
    sf_unlock(&sf_knob_lock);
    sf_event_knob(i, old, v, old_source, SF_SRC_RUNTIME);
    if (i == SF_KNOB_PROFILE_SAMPLE_BYTES) sf_prof_knob_changed();
    if (i == SF_KNOB_MEMORY_LIMIT || i == SF_KNOB_MEMORY_SOFT_PERCENT || i == SF_KNOB_MEMORY_LIMIT_ACTION)
        sf_memlimit_refresh();
    if (i == SF_KNOB_THREADS_CACHE_MAX) sf_heaps_shed_refresh();
    return 0;
}

SEFER_EXPORT const char *sefer_config_error(void) { return config_error; }

SEFER_EXPORT const char *sefer_config_source(const char *name) {
    sf_ensure_init();
    int i = name ? sf_knob_lookup(name, strlen(name)) : -1;
    if (i < 0) {
        fail(ENOENT, name, "unknown knob");
        return NULL;
    }
    sf_lock(&sf_knob_lock);
    uint8_t src = sf_knob_source(i);
    sf_unlock(&sf_knob_lock);
    return sf_knob_source_name(src);
}
