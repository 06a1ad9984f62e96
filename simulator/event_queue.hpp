#pragma once
// A min-queue of events ordered by (time, sequence number): events at equal times come out in
// the order they were pushed, so a simulation is deterministic. Time never goes backwards.
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <vector>

namespace shardcast::sim {

struct Event {
    int64_t time_ns = 0;
    uint64_t seq = 0;
    int32_t task = -1;       // the task whose end this is; -1 for a host issue
    uint32_t generation = 0; // a task's end may be rescheduled; stale ends are skipped
};

class EventQueue {
public:
    void clear() {
        m_heap.clear();
        m_next_seq = 0;
        m_now_ns = 0;
    }
    bool empty() const { return m_heap.empty(); }
    int64_t nowNs() const { return m_now_ns; }

    void push(int64_t time_ns, int32_t task, uint32_t generation = 0) {
        assert(time_ns >= m_now_ns && "an event may not be scheduled in the past");
        m_heap.push_back(Event{time_ns, m_next_seq++, task, generation});
        std::push_heap(m_heap.begin(), m_heap.end(), later);
    }
    Event pop() {
        assert(!m_heap.empty());
        std::pop_heap(m_heap.begin(), m_heap.end(), later);
        Event e = m_heap.back();
        m_heap.pop_back();
        assert(e.time_ns >= m_now_ns && "simulated time went backwards");
        m_now_ns = e.time_ns;
        return e;
    }

private:
    static bool later(const Event& a, const Event& b) {
        return a.time_ns != b.time_ns ? a.time_ns > b.time_ns : a.seq > b.seq;
    }
    std::vector<Event> m_heap;
    uint64_t m_next_seq = 0;
    int64_t m_now_ns = 0;
};

}  // namespace shardcast::sim
