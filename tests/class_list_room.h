/* class_list_room.h - for the tests of a small page's own free lists
 * (free and local_free): the calling thread's class list of a size set up
 * with a capacity of 0 (lib/page.c, "Class lists"), so that the owner's
 * frees of that class go to their pages, as they do whenever a list is
 * full.  Include after lib/internal.h; the thread has a heap of
 * its own (a malloc and free first). */
#ifndef SEFER_TEST_CLASS_LIST_ROOM_H
#define SEFER_TEST_CLASS_LIST_ROOM_H

static inline void st_class_list_no_room(size_t n)
{
    sf_heap_t *heap = sf_tls_heap;
    unsigned c = sf_class_of(n);
    sf_cl_flush_all(heap); /* (its blocks back to their pages) */
    sf_page_or_list_t *cl = sf_cl_of(heap, c);
    cl->class_idx = (uint8_t)c;
    cl->committed = 0;
    cl->used = 0;
    cl->in_use = 1;
}

#endif
