// work.cc - a C++ program whose memory goes through operator new/delete:
// containers, strings, smart pointers, virtual objects, arrays, over-aligned
// types, and objects deleted by a thread other than the one that made them.
// Prints only allocator-independent figures.  Usage: work_cxx [SCALE]
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

uint64_t rng = 0x9e3779b97f4a7c15ull;
uint64_t next_rand()
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

struct Shape {
    virtual ~Shape() = default;
    virtual uint64_t area() const = 0;
};
struct Rect : Shape {
    uint64_t w, h;
    Rect(uint64_t a, uint64_t b) : w(a), h(b) {}
    uint64_t area() const override { return w * h; }
};
struct Tri : Shape {
    uint64_t b, h;
    std::string label;
    Tri(uint64_t x, uint64_t y) : b(x), h(y), label("tri-" + std::to_string(x)) {}
    uint64_t area() const override { return b * h / 2 + label.size(); }
};

struct alignas(64) Line {
    uint64_t v[8];
};
struct alignas(256) Page {
    unsigned char bytes[1024];
};

void containers(int scale)
{
    std::map<std::string, std::vector<int>> m;
    std::unordered_map<uint64_t, std::string> um;
    for (int i = 0; i < 60000 * scale; i++) {
        uint64_t r = next_rand();
        m["k" + std::to_string(r % 5000)].push_back(i);
        um[r % 20000] = std::string(r % 40, char('a' + r % 26));
        if (i % 3 == 0)
            um.erase((r >> 7) % 20000);
    }
    size_t total = 0;
    for (auto &kv : m)
        total += kv.second.size() * kv.first.size();
    size_t chars = 0;
    for (auto &kv : um)
        chars += kv.second.size();
    std::printf("containers map=%zu total=%zu umap=%zu chars=%zu first=%s\n", m.size(), total,
                um.size(), chars, m.begin()->first.c_str());

    std::list<std::string> l;
    std::deque<uint64_t> dq;
    for (int i = 0; i < 50000 * scale; i++) {
        l.push_back(std::to_string(i * 7));
        dq.push_front(i);
        if (i % 4 == 0) {
            l.pop_front();
            dq.pop_back();
        }
    }
    l.sort();
    std::printf("list %zu %s %s deque %zu\n", l.size(), l.front().c_str(), l.back().c_str(),
                dq.size());
}

void objects(int scale)
{
    std::vector<std::unique_ptr<Shape>> shapes;
    for (int i = 0; i < 80000 * scale; i++) {
        uint64_t r = next_rand();
        if (r & 1)
            shapes.emplace_back(new Rect(r % 100, (r >> 8) % 100));
        else
            shapes.push_back(std::make_unique<Tri>(r % 100, (r >> 8) % 100));
        if (i % 5 == 4)
            shapes.erase(shapes.begin() + (r >> 16) % shapes.size());
    }
    uint64_t area = 0;
    for (auto &s : shapes)
        area += s->area();
    std::stable_sort(shapes.begin(), shapes.end(),
                     [](const std::unique_ptr<Shape> &a, const std::unique_ptr<Shape> &b) {
                         return a->area() < b->area();
                     });
    std::printf("shapes %zu area=%llu min=%llu max=%llu\n", shapes.size(),
                (unsigned long long)area, (unsigned long long)shapes.front()->area(),
                (unsigned long long)shapes.back()->area());

    std::vector<std::shared_ptr<std::string>> shared;
    for (int i = 0; i < 30000 * scale; i++) {
        auto p = std::make_shared<std::string>(std::to_string(next_rand()));
        shared.push_back(p);
        if (i % 2)
            shared.push_back(p);
    }
    size_t uses = 0;
    for (auto &p : shared)
        uses += p.use_count();
    std::printf("shared %zu uses=%zu\n", shared.size(), uses);

    // Arrays and over-aligned types: operator new[] and aligned new.
    uint64_t misaligned = 0, sum = 0;
    for (int i = 0; i < 20000 * scale; i++) {
        int n = 1 + int(next_rand() % 64);
        auto *a = new uint32_t[n];
        for (int j = 0; j < n; j++)
            a[j] = uint32_t(j * i);
        sum += a[n - 1];
        delete[] a;
        auto *ln = new Line();
        misaligned += reinterpret_cast<uintptr_t>(ln) % alignof(Line) != 0;
        ln->v[7] = i;
        sum += ln->v[7];
        delete ln;
        if (i % 16 == 0) {
            auto *pg = new Page[3];
            misaligned += reinterpret_cast<uintptr_t>(pg) % alignof(Page) != 0;
            pg[2].bytes[1023] = 1;
            sum += pg[2].bytes[1023];
            delete[] pg;
        }
        auto *nt = new (std::nothrow) char[1000 + i % 5000];
        if (nt) {
            nt[0] = 1;
            sum += nt[0];
        }
        delete[] nt;
    }
    std::printf("arrays sum=%llu misaligned=%llu\n", (unsigned long long)sum,
                (unsigned long long)misaligned);
}

// A producer thread allocates, consumer threads delete: cross-thread frees.
void threads(int scale)
{
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::vector<std::string> *> q;
    bool done = false;
    const int items = 20000 * scale;
    uint64_t seen[2] = {0, 0};

    std::thread prod([&] {
        for (int i = 0; i < items; i++) {
            auto *v = new std::vector<std::string>();
            for (int j = 0; j < i % 8 + 1; j++)
                v->push_back(std::string(size_t(j * 9 + i % 50), 'x'));
            std::lock_guard<std::mutex> g(mu);
            q.push_back(v);
            cv.notify_one();
        }
        std::lock_guard<std::mutex> g(mu);
        done = true;
        cv.notify_all();
    });
    std::vector<std::thread> cons;
    for (int c = 0; c < 2; c++) {
        cons.emplace_back([&, c] {
            uint64_t local = 0;
            for (;;) {
                std::vector<std::string> *v;
                {
                    std::unique_lock<std::mutex> g(mu);
                    cv.wait(g, [&] { return !q.empty() || done; });
                    if (q.empty())
                        break;
                    v = q.front();
                    q.pop_front();
                }
                for (auto &s : *v)
                    local += s.size();
                delete v;
            }
            seen[c] = local;
        });
    }
    prod.join();
    for (auto &t : cons)
        t.join();
    std::printf("threads bytes=%llu\n", (unsigned long long)(seen[0] + seen[1]));
}

} // namespace

int main(int argc, char **argv)
{
    int scale = argc > 1 ? std::atoi(argv[1]) : 1;
    if (scale < 1)
        scale = 1;
    containers(scale);
    objects(scale);
    threads(scale);
    std::printf("done\n");
    return 0;
}
