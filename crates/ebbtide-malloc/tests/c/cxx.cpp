// C++ operators on ebbtide: every form of new/delete, the new handler, and a real
// std::bad_alloc from a request nothing can serve.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>
#include <malloc.h>

static int failures;
#define CHECK(c) do { if (!(c)) { std::fprintf(stderr, "FAIL %d: %s\n", __LINE__, #c); failures++; } } while (0)

struct alignas(256) Wide { char b[300]; };
static int throwing_calls;
static void throwing_handler() {
    throwing_calls++;
    throw std::bad_alloc();
}
static int handler_calls;
static void handler() {
    handler_calls++;
    std::set_new_handler(nullptr); // next failure throws
}

int main() {
    // containers and strings (operator new/delete through the standard library)
    std::map<std::string, std::vector<int>> m;
    for (int i = 0; i < 20000; i++) m[std::to_string(i * 7919 % 100003)].push_back(i);
    CHECK(m.size() == 20000);
    size_t total = 0;
    for (auto &kv : m) total += kv.second.size();
    CHECK(total == 20000);
    // the ops bind to ebbtide: usable size known for a new'd block
    int *p = new int[100];
    CHECK(malloc_usable_size(p) >= 400);
    delete[] p;
    // aligned new
    Wide *w = new Wide;
    CHECK(reinterpret_cast<uintptr_t>(w) % 256 == 0);
    delete w;
    auto arr = std::make_unique<Wide[]>(10);
    CHECK(reinterpret_cast<uintptr_t>(arr.get()) % 256 == 0);
    // nothrow
    void *q = ::operator new(64, std::nothrow);
    CHECK(q != nullptr);
    ::operator delete(q, std::nothrow);
    CHECK(::operator new(static_cast<size_t>(-1) / 2, std::nothrow) == nullptr);
    // sized delete
    q = ::operator new(1000);
    ::operator delete(q, 1000);
    // threads allocating and freeing each other's blocks
    std::vector<std::string *> shared(10000);
    std::thread a([&] { for (auto &s : shared) s = new std::string(100, 'x'); });
    a.join();
    std::thread b([&] { for (auto s : shared) { CHECK(s->size() == 100); delete s; } });
    b.join();
    // a real std::bad_alloc, after the new handler ran once
    std::set_new_handler(handler);
    bool caught = false;
    try {
        volatile size_t huge = static_cast<size_t>(1) << 62;
        char *x = new char[huge];
        x[0] = 1;
    } catch (const std::bad_alloc &e) {
        caught = true;
        CHECK(std::string(e.what()).find("bad_alloc") != std::string::npos);
    }
    CHECK(caught);
    CHECK(handler_calls == 1);
    // A nothrow form whose new handler throws returns nullptr (the standard; libstdc++'s own
    // operators do): the exception does not escape it.
    std::set_new_handler(throwing_handler);
    volatile size_t huge2 = static_cast<size_t>(1) << 62;
    bool escaped = false;
    try {
        CHECK(::operator new(huge2, std::nothrow) == nullptr);
        CHECK(::operator new[](huge2, std::nothrow) == nullptr);
        CHECK(::operator new(huge2, std::align_val_t(64), std::nothrow) == nullptr);
        CHECK(::operator new[](huge2, std::align_val_t(64), std::nothrow) == nullptr);
    } catch (...) {
        escaped = true;
    }
    CHECK(!escaped);
    CHECK(throwing_calls == 4);
    std::set_new_handler(nullptr);
    std::printf(failures ? "failed\n" : "cxx ok\n");
    return failures != 0;
}
