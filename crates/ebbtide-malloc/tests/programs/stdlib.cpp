// A C++ program on the standard library for the malloc test
// (crates/ebbtide-malloc/tests/real_programs.rs): containers, strings, streams, regex,
// exceptions (also across threads), threads handing objects to each other, std::bad_alloc from
// a huge `new`, a custom new handler, nothrow and over-aligned `new`. Deterministic output.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <iostream>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

static std::uint64_t fnv(const std::string &s, std::uint64_t h = 1469598103934665603ull) {
    for (unsigned char c : s) { h ^= c; h *= 1099511628211ull; }
    return h;
}

static void containers() {
    std::map<std::string, std::vector<int>> m;
    std::unordered_map<int, std::string> u;
    std::list<std::string> l;
    std::deque<std::pair<int, std::string>> d;
    std::set<std::string> s;
    for (int i = 0; i < 200000; i++) {
        std::string k = "k" + std::to_string(i % 5003);
        m[k].push_back(i);
        u[i] = std::string(i % 41, char('a' + i % 26));
        if (i % 3 == 0) l.push_back(k + "/" + std::to_string(i));
        d.emplace_back(i, k);
        if (d.size() > 1000) d.pop_front();
        s.insert(std::to_string(i * 7919 % 100003));
    }
    for (int i = 0; i < 200000; i += 2) u.erase(i);
    std::uint64_t h = 0;
    for (auto &kv : m) h = fnv(kv.first, h) + kv.second.size();
    std::size_t ulen = 0;
    for (auto &kv : u) ulen += kv.second.size();
    l.sort();
    std::cout << "containers " << m.size() << " " << h << " " << u.size() << " " << ulen << " "
              << l.size() << " " << l.front() << " " << d.front().first << " " << s.size() << "\n";
}

static void strings() {
    std::string big;
    for (int i = 0; i < 300000; i++) big += std::to_string(i % 97) + (i % 2 ? "," : ";");
    std::stringstream ss(big);
    std::string item;
    std::size_t n = 0, total = 0;
    while (std::getline(ss, item, ',')) { n++; total += item.size(); }
    std::ostringstream os;
    for (int i = 0; i < 50000; i++) os << i << ':' << (i * 0.5) << ' ';
    std::regex re("(\\d+):(\\d+)\\.5 ");
    std::string sample = os.str().substr(0, 200000);
    auto begin = std::sregex_iterator(sample.begin(), sample.end(), re);
    std::size_t matches = std::distance(begin, std::sregex_iterator());
    std::string replaced = std::regex_replace(sample.substr(0, 20000), std::regex("[13579]"), "<odd>");
    std::cout << "strings " << big.size() << " " << n << " " << total << " " << fnv(os.str()) << " "
              << matches << " " << fnv(replaced) << "\n";
}

struct Thrown : std::runtime_error {
    std::vector<std::string> payload;
    explicit Thrown(int i) : std::runtime_error("thrown " + std::to_string(i)),
        payload(i % 10, std::string(100, 'p')) {}
};

static void exceptions() {
    int caught = 0;
    std::size_t what_len = 0;
    for (int i = 0; i < 20000; i++) {
        try {
            std::vector<std::string> local(i % 7, "local");
            if (i % 3 == 0) throw Thrown(i);
            if (i % 3 == 1) throw std::out_of_range("range " + std::to_string(i));
            std::vector<int> v(3);
            (void)v.at(i);
        } catch (const Thrown &e) {
            caught++;
            what_len += std::string(e.what()).size() + e.payload.size();
        } catch (const std::out_of_range &e) {
            caught++;
            what_len += std::string(e.what()).size() > 0;
        }
    }
    // An exception made on one thread, rethrown on another.
    std::exception_ptr ep;
    std::thread t([&] {
        try { throw Thrown(42); } catch (...) { ep = std::current_exception(); }
    });
    t.join();
    std::string across;
    try { std::rethrow_exception(ep); } catch (const Thrown &e) { across = e.what(); }
    std::cout << "exceptions " << caught << " " << what_len << " " << across << "\n";
}

// Producers hand strings and vectors to consumers: blocks freed by other threads.
static void threads() {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::unique_ptr<std::vector<std::string>>> q;
    bool done = false;
    std::atomic<std::uint64_t> consumed{0};
    std::vector<std::thread> consumers;
    for (int c = 0; c < 3; c++) {
        consumers.emplace_back([&] {
            for (;;) {
                std::unique_ptr<std::vector<std::string>> item;
                {
                    std::unique_lock<std::mutex> g(mu);
                    cv.wait(g, [&] { return !q.empty() || done; });
                    if (q.empty()) return;
                    item = std::move(q.front());
                    q.pop_front();
                }
                std::uint64_t n = 0;
                for (auto &s : *item) n += s.size();
                consumed += n;
            }
        });
    }
    std::vector<std::thread> producers;
    for (int p = 0; p < 3; p++) {
        producers.emplace_back([&, p] {
            for (int i = 0; i < 20000; i++) {
                auto v = std::make_unique<std::vector<std::string>>();
                for (int j = 0; j < i % 13; j++) v->push_back(std::string((p + i + j) % 300, 'z'));
                std::lock_guard<std::mutex> g(mu);
                q.push_back(std::move(v));
                cv.notify_one();
            }
        });
    }
    for (auto &t : producers) t.join();
    {
        std::lock_guard<std::mutex> g(mu);
        done = true;
    }
    cv.notify_all();
    for (auto &t : consumers) t.join();
    // Short-lived threads with their own allocations.
    std::atomic<int> ok{0};
    for (int round = 0; round < 20; round++) {
        std::vector<std::thread> ts;
        for (int i = 0; i < 4; i++)
            ts.emplace_back([&] { std::map<int, std::string> m; for (int k = 0; k < 2000; k++) m[k] = "t"; ok += m.size() == 2000; });
        for (auto &t : ts) t.join();
    }
    std::cout << "threads " << consumed.load() << " " << ok.load() << "\n";
}

static volatile std::size_t huge = std::size_t(1) << 62;
static int handler_calls = 0;
static void handler() {
    // Called by operator new when it cannot allocate: the third call gives up by removing
    // itself, so operator new throws std::bad_alloc.
    if (++handler_calls == 3) std::set_new_handler(nullptr);
}

static void out_of_memory() {
    std::string what;
    try {
        char *p = new char[huge];
        p[0] = 1;
        std::cout << "huge new succeeded?!\n";
    } catch (const std::bad_alloc &e) {
        what = "bad_alloc";
    }
    char *nt = new (std::nothrow) char[huge];
    bool vec_threw = false;
    try {
        std::vector<std::uint64_t> v;
        v.reserve(huge / 16);
    } catch (const std::bad_alloc &) {
        vec_threw = true;
    }
    std::set_new_handler(handler);
    bool handled = false;
    try {
        void *p = ::operator new(huge);
        ::operator delete(p);
    } catch (const std::bad_alloc &) {
        handled = true;
    }
    std::cout << "oom " << what << " nothrow=" << (nt == nullptr ? "null" : "non-null")
              << " vector=" << vec_threw << " handler_calls=" << handler_calls << " then_bad_alloc=" << handled
              << "\n";
}

struct alignas(256) Wide { char b[300]; };

static void aligned() {
    bool ok = true;
    std::vector<std::unique_ptr<Wide>> v;
    for (int i = 0; i < 2000; i++) {
        v.push_back(std::make_unique<Wide>());
        ok &= reinterpret_cast<std::uintptr_t>(v.back().get()) % 256 == 0;
    }
    Wide *arr = new Wide[17];
    ok &= reinterpret_cast<std::uintptr_t>(arr) % 256 == 0;
    delete[] arr;
    for (std::size_t a = 16; a <= 65536; a *= 4) {
        void *p = ::operator new(1000, std::align_val_t(a));
        ok &= reinterpret_cast<std::uintptr_t>(p) % a == 0;
        ::operator delete(p, 1000, std::align_val_t(a));
    }
    std::cout << "aligned " << (ok ? "ok" : "MISALIGNED") << "\n";
}

int main() {
    containers();
    strings();
    exceptions();
    threads();
    out_of_memory();
    aligned();
    std::cout << "done\n";
    return 0;
}
