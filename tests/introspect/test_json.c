/* test_json.c - integers in the introspection JSON stay exact above 2^53.
 * cJSON keeps numbers as doubles; introspect/json.c writes 64-bit counts as
 * raw decimal text.  This links introspect/json.c itself (with cjson.c,
 * which loads libcjson.so.1 for it) and checks the printed text of values a
 * double cannot hold; and that a reply with an item that could not be made
 * has no body (the server answers 503); and that strings that are not
 * UTF-8 come out as UTF-8 all the same. */
#include "../sefer_test.h"

#include "introspect.h"

static void load_cjson(void)
{
    char why[256];
    ck_assert_msg(sf_cjson_load(why, sizeof why), "%s", why);
}

START_TEST(test_u64_exact)
{
    static const uint64_t values[] = {0, 1, 9007199254740992ull /* 2^53 */, 9007199254740993ull,
                                      18446744073709551557ull, UINT64_MAX};
    static const char *const texts[] = {"0", "1", "9007199254740992", "9007199254740993",
                                        "18446744073709551557", "18446744073709551615"};
    load_cjson();
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        cJSON *o = cJSON_CreateObject();
        sf_json_u64(o, "bytes", values[i]);
        char *text = cJSON_PrintUnformatted(o);
        char want[64];
        snprintf(want, sizeof want, "{\"bytes\":%s}", texts[i]);
        ck_assert_str_eq(text, want);
        /* and it is valid JSON */
        cJSON *back = cJSON_Parse(text);
        ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(back, "bytes")));
        cJSON_Delete(back);
        free(text);
        cJSON_Delete(o);
    }
    /* the trap this avoids: a double rounds 2^53 + 1 */
    cJSON *d = cJSON_CreateNumber((double)9007199254740993ull);
    char *t = cJSON_PrintUnformatted(d);
    ck_assert_str_ne(t, "9007199254740993");
    free(t);
    cJSON_Delete(d);
}
END_TEST

START_TEST(test_other_helpers)
{
    load_cjson();
    cJSON *o = cJSON_CreateObject();
    sf_json_hex(o, "base", (uintptr_t)0x7f0012400000ull);
    sf_json_double(o, "rate", 0.25);
    sf_json_null(o, "rss");
    sf_json_str(o, "s", "a\"b\n");
    char *text = cJSON_PrintUnformatted(o);
    ck_assert_str_eq(text, "{\"base\":\"0x7f0012400000\",\"rate\":0.25,"
                           "\"rss\":null,\"s\":\"a\\\"b\\n\"}");
    free(text);
    cJSON_Delete(o);
    sf_text_t t = {0};
    for (int i = 0; i < 10000; i++)
        sf_text_addf(&t, "%d,", i);
    ck_assert(!t.failed);
    ck_assert_uint_eq(t.len, strlen(t.buf));
    ck_assert(strncmp(t.buf + t.len - 5, "9999,", 5) == 0);
    free(t.buf);
}
END_TEST

/* An item that could not be made (NULL from cJSON_Create*, as when malloc
 * fails) or an object that is NULL: the reply gets no body, once. */
START_TEST(test_missing_item_means_no_reply)
{
    load_cjson();
    cJSON *o = cJSON_CreateObject();
    sf_json_str(o, "a", "b");
    sf_json_add(o, "lost", NULL);
    sf_reply_t r = {0};
    sf_reply_json(&r, 200, o, false);
    ck_assert_ptr_null(r.body);
    o = cJSON_CreateObject();
    sf_json_u64(NULL, "x", 1);
    sf_json_str(o, "a", "b");
    sf_reply_json(&r, 200, o, false);
    ck_assert_ptr_null(r.body);
    o = cJSON_CreateObject(); /* the failure is forgotten once answered */
    sf_json_str(o, "a", "b");
    sf_reply_json(&r, 200, o, false);
    ck_assert_str_eq(r.body, "{\"a\":\"b\"}");
    free(r.body);
}
END_TEST

/* Text from the process or the request need not be UTF-8 (a thread name,
 * a phase name cut at 63 bytes, a path, a query parameter named "%ff"): what
 * is printed must be, or no JSON parser takes the reply.  A byte that
 * starts no well-formed character becomes U+FFFD; valid text is kept. */
START_TEST(test_strings_are_utf8)
{
    static const char *const in[] = {
        "plain", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", /* valid: kept as is */
        "bad\xff\xfename",      /* bytes that start nothing */
        "aaa\xc3",               /* a character cut by the end */
        "\xe2\x82x",             /* cut by the next character */
        "\xc0\xaf",              /* overlong '/' */
        "\xed\xa0\x80",          /* a surrogate */
        "\xf4\x90\x80\x80",      /* above U+10FFFF */
    };
    static const char *const out[] = {
        "plain", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
        "bad\xef\xbf\xbd\xef\xbf\xbdname",
        "aaa\xef\xbf\xbd",
        "\xef\xbf\xbd\xef\xbf\xbdx",
        "\xef\xbf\xbd\xef\xbf\xbd",
        "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd",
        "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd",
    };
    load_cjson();
    for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
        cJSON *o = cJSON_CreateObject();
        sf_json_str(o, "s", in[i]);
        char *text = cJSON_PrintUnformatted(o), want[128];
        snprintf(want, sizeof want, "{\"s\":\"%s\"}", out[i]);
        ck_assert_msg(strcmp(text, want) == 0, "string %zu: %s", i, text);
        free(text);
        cJSON_Delete(o);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("introspect-json");
    TCase *tc = tcase_create("json");
    tcase_add_test(tc, test_u64_exact);
    tcase_add_test(tc, test_other_helpers);
    tcase_add_test(tc, test_missing_item_means_no_reply);
    tcase_add_test(tc, test_strings_are_utf8);
    suite_add_tcase(s, tc);
    return st_run_suite(s);
}
