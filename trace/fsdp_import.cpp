#include "trace/fsdp_import.hpp"

#include <algorithm>
#include <cassert>
#include <map>
#include <numeric>
#include <set>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

namespace shardcast::trace {
namespace {

using core::Result;
using core::TaskKind;

constexpr std::string_view kFsdp2Prefix = "FSDP::";
constexpr std::string_view kFsdp1Prefix = "FullyShardedDataParallel.";

// The hooks of one unit that bound its compute, and the labels that only name work inside them.
enum class Hook : uint8_t {
    RootPreForward,
    PreForward,
    PostForward,
    PreBackward,
    PostBackward,       // FSDP2: post_backward, post_backward_reshard, post_backward_reduce, rs_wait
    AllGather,          // the unshard's issue: copy-in and the collective
    CopyOut,
    Prefetch,           // forward_prefetch / backward_prefetch for a unit: issues its unshard
    RootPostBackward,
    Step,               // FSDP1 labels of the step that name no unit (rate limiter, _to_kwargs)
    Unknown,
};

struct Label {
    Hook hook = Hook::Unknown;
    int32_t unit = -1;  // Program unit; -1: none or not a unit of the Program
    size_t event = 0;   // index into the trace's events
    int64_t start = 0, end = 0;
    bool mapped = false;
};

std::string_view trim(std::string_view s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    return s;
}

// "FSDP::pre_forward (model.layers.0)" -> {"pre_forward", "model.layers.0"}; "FSDP::backward_prefetch
// for model.layers.3" -> {"backward_prefetch", "model.layers.3"}; the root's labels have no name or "()".
std::pair<std::string_view, std::string_view> splitFsdp2(std::string_view label) {
    label.remove_prefix(kFsdp2Prefix.size());
    const size_t paren = label.find(" (");
    if (paren != std::string_view::npos && label.back() == ')') {
        return {label.substr(0, paren), trim(label.substr(paren + 2, label.size() - paren - 3))};
    }
    const size_t for_pos = label.find(" for ");
    if (for_pos != std::string_view::npos) return {label.substr(0, for_pos), trim(label.substr(for_pos + 5))};
    return {trim(label), {}};
}

Hook fsdp2Hook(std::string_view kind) {
    if (kind == "root_pre_forward") return Hook::RootPreForward;
    if (kind == "pre_forward") return Hook::PreForward;
    if (kind == "post_forward") return Hook::PostForward;
    if (kind == "pre_backward") return Hook::PreBackward;
    if (kind == "post_backward" || kind == "post_backward_reshard" || kind == "post_backward_reduce" ||
        kind == "post_backward_rs_wait" || kind == "post_backward_accumulate") {
        return Hook::PostBackward;
    }
    if (kind == "all_gather" || kind == "unshard") return Hook::AllGather;
    if (kind == "all_gather_copy_out" || kind == "wait_for_unshard") return Hook::CopyOut;
    if (kind == "forward_prefetch" || kind == "backward_prefetch") return Hook::Prefetch;
    if (kind == "root_post_backward_callback" || kind == "root_post_backward") return Hook::RootPostBackward;
    return Hook::Unknown;
}

Hook fsdp1Hook(std::string_view name) {
    name.remove_prefix(kFsdp1Prefix.size());
    if (name == "_root_pre_forward") return Hook::RootPreForward;
    if (name == "_pre_forward") return Hook::PreForward;
    if (name == "_post_forward") return Hook::PostForward;
    if (name == "_pre_backward_hook") return Hook::PreBackward;
    if (name == "_post_backward_hook") return Hook::PostBackward;
    if (name == "_pre_forward_prefetch" || name == "_pre_backward_prefetch" || name == "_post_backward_prefetch") {
        return Hook::Prefetch;
    }
    if (name == "forward" || name == "rate_limiter" || name == "_to_kwargs" || name == "_wait_for_previous_optim_step") {
        return Hook::Step;
    }
    return Hook::Unknown;
}

// "FSDP::pre_forward (model.layers.0)" -> "FSDP::pre_forward (<unit>)", for counting by label.
std::string normalizedLabel(std::string_view label) {
    if (!label.starts_with(kFsdp2Prefix)) return std::string(label);
    const auto [kind, unit] = splitFsdp2(label);
    if (unit.empty()) return std::string(label);
    const bool for_form = label.find(" for ") != std::string_view::npos && label.back() != ')';
    return fmt::format("FSDP::{}{}", kind, for_form ? " for <unit>" : " (<unit>)");
}

enum class CollKind : uint8_t { AllGather, ReduceScatter, AllReduce, Other };

CollKind collectiveKind(std::string_view name) {
    std::string lower(name);
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::erase(lower, '_');
    if (lower.find("allgather") != std::string::npos) return CollKind::AllGather;
    if (lower.find("reducescatter") != std::string::npos) return CollKind::ReduceScatter;
    if (lower.find("allreduce") != std::string::npos) return CollKind::AllReduce;
    return CollKind::Other;
}

bool isNcclKernel(const RankTrace& t, const Event& e) {
    return e.category == Category::Kernel && t.name(e).starts_with("nccl");
}
// The op the host issues a collective with: c10d's dispatcher op (c10d::_allgather_base_, ...), or
// the nccl:* op of older NCCL process groups.
bool isIssueOp(std::string_view name) { return name.starts_with("c10d::") || name.starts_with("nccl:"); }

struct Window {
    int64_t number = 0;  // ProfilerStep#N, or the index of the step
    int64_t start = 0, end = 0;
};

// The thread that runs the training loop: the one with the FSDP hooks or the profiler's steps.
// The training loop's thread: the one that labels ProfilerStep#N, else the one with the most FSDP
// labels. On a GPU run backward (and its FSDP hooks) runs on autograd's device thread, so the FSDP
// labels alone would pick that one.
std::optional<std::pair<int64_t, int64_t>> mainThread(const RankTrace& t) {
    std::map<std::pair<int64_t, int64_t>, int64_t> steps, labels;
    for (const Event& e : t.events) {
        if (e.category != Category::UserAnnotation) continue;
        const std::string_view n = t.name(e);
        if (n.starts_with("ProfilerStep#")) ++steps[{e.pid, e.tid}];
        if (n.starts_with(kFsdp2Prefix) || n.starts_with(kFsdp1Prefix)) ++labels[{e.pid, e.tid}];
    }
    const auto& votes = steps.empty() ? labels : steps;
    if (votes.empty()) return std::nullopt;
    return std::max_element(votes.begin(), votes.end(), [](const auto& a, const auto& b) { return a.second < b.second; })->first;
}

// The threads of the training process whose work is the step's: the main thread and every thread of
// its process that runs FSDP hooks (autograd's device threads on a GPU run).
std::set<int64_t> hostThreads(const RankTrace& t, std::pair<int64_t, int64_t> main) {
    std::set<int64_t> tids{main.second};
    for (const Event& e : t.events) {
        if (e.pid != main.first || e.category != Category::UserAnnotation) continue;
        const std::string_view n = t.name(e);
        if (n.starts_with(kFsdp2Prefix) || n.starts_with(kFsdp1Prefix)) tids.insert(e.tid);
    }
    return tids;
}

// GPU work: a kernel, copy or memset, each queued by a launch on the host with the same correlation.
bool isDeviceWork(const Event& e) {
    return e.category == Category::Kernel || e.category == Category::Memcpy || e.category == Category::Memset;
}

bool isRootPreForward(std::string_view n) {
    return n == "FSDP::root_pre_forward" || n == "FullyShardedDataParallel._root_pre_forward";
}

// Steps: ProfilerStep#N spans, or (no schedule) from one root pre-forward to the next, the last ending
// with the optimizer step that follows it.
std::vector<Window> stepWindows(const RankTrace& t, std::pair<int64_t, int64_t> main) {
    std::vector<Window> steps;
    std::vector<int64_t> roots;
    std::vector<int64_t> optimizer_ends;
    for (const Event& e : t.events) {
        if (e.pid != main.first || e.tid != main.second || e.category != Category::UserAnnotation) continue;
        const std::string_view n = t.name(e);
        if (n.starts_with("ProfilerStep#")) {
            int64_t number = 0;
            for (char c : n.substr(13)) {
                if (c < '0' || c > '9' || number > 1'000'000'000) break;
                number = number * 10 + (c - '0');
            }
            steps.push_back(Window{number, e.ts_ns, e.endNs()});
        } else if (isRootPreForward(n)) {
            roots.push_back(e.ts_ns);
        } else if (n.starts_with("Optimizer.step#")) {
            optimizer_ends.push_back(e.endNs());
        }
    }
    if (!steps.empty()) {
        std::sort(steps.begin(), steps.end(), [](const Window& a, const Window& b) { return a.start < b.start; });
        return steps;
    }
    std::sort(roots.begin(), roots.end());
    // FSDP1 labels _root_pre_forward in every unit's forward: a step starts at the first after an optimizer step.
    std::sort(optimizer_ends.begin(), optimizer_ends.end());
    std::vector<int64_t> starts;
    for (const int64_t r : roots) {
        if (starts.empty()) {
            starts.push_back(r);
            continue;
        }
        const auto opt = std::lower_bound(optimizer_ends.begin(), optimizer_ends.end(), starts.back());
        if (opt != optimizer_ends.end() && *opt <= r) starts.push_back(r);
    }
    for (size_t i = 0; i < starts.size(); ++i) {
        const auto opt = std::lower_bound(optimizer_ends.begin(), optimizer_ends.end(), starts[i]);
        if (opt == optimizer_ends.end()) break;  // no optimizer step after it: incomplete
        if (i + 1 < starts.size() && *opt > starts[i + 1]) continue;
        steps.push_back(Window{static_cast<int64_t>(i), starts[i], *opt});
    }
    return steps;
}

// Intervals [a, b) of `outer` not covered by `inner` (sorted, possibly overlapping), non-empty.
std::vector<std::pair<int64_t, int64_t>> gaps(std::pair<int64_t, int64_t> outer, std::vector<std::pair<int64_t, int64_t>> inner) {
    std::sort(inner.begin(), inner.end());
    std::vector<std::pair<int64_t, int64_t>> out;
    int64_t at = outer.first;
    for (const auto& [a, b] : inner) {
        if (b <= at || a >= outer.second) continue;
        if (a > at) out.push_back({at, a});
        at = std::max(at, b);
    }
    if (at < outer.second) out.push_back({at, outer.second});
    return out;
}

class Importer {
public:
    Importer(const RankTrace& t, const core::Program& program, Window window, std::pair<int64_t, int64_t> main)
        : m_t(t), m_program(program), m_window(window), m_main(main), m_host(hostThreads(t, main)) {
        for (size_t u = 0; u < program.units.size(); ++u) {
            const auto& name = program.units[u].name;
            m_unit_of[u == 0 || program.units[u].is_root ? std::string() : name] = static_cast<int32_t>(u);
        }
        for (int32_t id = 0; id < program.size(); ++id) {
            const core::Task& task = program.tasks[static_cast<size_t>(id)];
            m_tasks[{task.unit, task.kind}].push_back(id);
        }
        m_spans.assign(program.tasks.size(), std::nullopt);
        m_pieces.assign(program.tasks.size(), {});
        m_on_device.assign(program.tasks.size(), 0);
    }

    Result<TraceImport> run() {
        TraceImport out;
        collectEvents(out);
        if (m_labels.empty()) {
            return core::makeError(fmt::format(
                "{}: step {} has no FSDP labels (FSDP::* or FullyShardedDataParallel.*): not a trace of an FSDP run, "
                "or recorded without torch.profiler's record_function labels",
                m_t.path.string(), m_window.number));
        }
        out.flavour = m_fsdp1 ? "FSDP1" : "FSDP2";
        if (m_fsdp1) assignFsdp1Units();
        linkParents();
        computeSpans();
        collectiveSpans();
        copySpans();
        optimizerSpans();
        if (!m_launches.empty() && !m_device_of.empty()) {
            out.device_time = true;
            deviceSpans();
        }
        out.fsdp_labels = static_cast<int64_t>(m_labels.size());
        std::map<std::string, int64_t> unmapped;
        for (const Label& l : m_labels) {
            if (l.mapped) {
                ++out.fsdp_mapped;
            } else {
                ++unmapped[normalizedLabel(m_t.name(m_t.events[l.event]))];
            }
        }
        for (const auto& [label, n] : unmapped) out.unmapped.push_back(LabelCount{label, n});
        buildTimeline(out);
        taskOps(out);
        return out;
    }

private:
    // On the training loop's thread or another thread of its process that runs FSDP hooks.
    bool onMain(const Event& e) const { return e.pid == m_main.first && m_host.contains(e.tid); }
    bool inWindow(const Event& e) const { return e.ts_ns >= m_window.start && e.ts_ns < m_window.end; }

    void collectEvents(TraceImport& out) {
        std::vector<size_t> order;
        for (size_t i = 0; i < m_t.events.size(); ++i) {
            const Event& e = m_t.events[i];
            if (!inWindow(e)) continue;
            ++out.events_in_step;
            order.push_back(i);
        }
        // Parents before children: by start, the longer first.
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            const Event& x = m_t.events[a];
            const Event& y = m_t.events[b];
            return x.ts_ns != y.ts_ns ? x.ts_ns < y.ts_ns : x.dur_ns > y.dur_ns;
        });
        for (const size_t i : order) {
            const Event& e = m_t.events[i];
            const std::string_view n = m_t.name(e);
            if (onMain(e) && e.category == Category::CpuOp) m_ops.push_back(i);
            if (onMain(e) && e.category == Category::UserAnnotation) {
                if (n.starts_with(kFsdp2Prefix)) {
                    const auto [kind, unit] = splitFsdp2(n);
                    Label l{fsdp2Hook(kind), -1, i, e.ts_ns, e.endNs(), false};
                    l.unit = unitNamed(unit);
                    m_labels.push_back(l);
                } else if (n.starts_with(kFsdp1Prefix)) {
                    m_fsdp1 = true;
                    m_labels.push_back(Label{fsdp1Hook(n), -1, i, e.ts_ns, e.endNs(), false});
                } else if (n.starts_with("Optimizer.step#")) {
                    m_optimizer.push_back(i);
                }
            } else if (onMain(e) && isIssueOp(n) && e.category == Category::CpuOp) {
                // Only the outermost issue op: c10d ops nest the process group's own op.
                if (m_issues.empty() || m_t.events[m_issues.back()].endNs() <= e.ts_ns) m_issues.push_back(i);
            } else if (onMain(e) && n == "fsdp::all_gather_copy_in") {
                m_copy_in.push_back(i);
            } else if (!onMain(e) && e.category == Category::UserAnnotation && n.starts_with("gloo:")) {
                m_gloo.push_back(i);
            } else if (isNcclKernel(m_t, e)) {
                m_nccl.push_back(i);
            } else if (isDeviceWork(e) && e.correlation > 0) {
                m_device_of.emplace(e.correlation, i);
            } else if (onMain(e) && (e.category == Category::Runtime || e.category == Category::Driver) && e.correlation > 0) {
                m_launches.push_back(i);
            }
        }
        out.collectives = !m_nccl.empty() ? "nccl" : !m_gloo.empty() ? "gloo" : "none";
    }

    // FSDP1's labels name no unit: the units' forwards run in Program unit order (units[0] the root,
    // its forward outermost), pre-backward hooks in reverse order after the root's, post-backward
    // hooks in reverse order with the root's last.
    void assignFsdp1Units() {
        const auto units = static_cast<int32_t>(m_program.units.size());
        std::vector<int32_t>& backward_pre = m_backward_order;
        std::vector<int32_t> backward_post;
        backward_pre.assign(1, 0);
        for (int32_t u = units - 1; u >= 1; --u) {
            backward_pre.push_back(u);
            backward_post.push_back(u);
        }
        backward_post.push_back(0);
        size_t pre_f = 0, pre_b = 0, post_b = 0;
        for (Label& l : m_labels) {
            switch (l.hook) {
            case Hook::PreForward:
                if (pre_f < static_cast<size_t>(units)) l.unit = static_cast<int32_t>(pre_f);
                ++pre_f;
                break;
            case Hook::PreBackward:
                if (pre_b < backward_pre.size()) l.unit = backward_pre[pre_b];
                ++pre_b;
                break;
            case Hook::PostBackward:
                if (post_b < backward_post.size()) l.unit = backward_post[post_b];
                ++post_b;
                break;
            default:
                break;
            }
        }
        // Post-forwards: each closes the innermost open pre-forward (FSDP1 nests child units in the root).
        std::vector<Label*> open;
        std::vector<Label*> events;
        for (Label& l : m_labels) {
            if (l.hook == Hook::PreForward || l.hook == Hook::PostForward) events.push_back(&l);
        }
        for (Label* l : events) {
            if (l->hook == Hook::PreForward) {
                open.push_back(l);
            } else if (!open.empty()) {
                // A block's post-forward comes right after its pre-forward's compute; the root's
                // stays open over the blocks.
                Label* pre = open.back();
                open.pop_back();
                l->unit = pre->unit;
                if (pre->unit == 0 && !open.empty()) open.push_back(pre);
            }
        }
    }

    // Each unit's forward compute: from its pre-forward's end to its post-forward's start, less the
    // forwards of the units nested in it; backward likewise from pre-backward to post-backward.
    void computeSpans() {
        for (const auto& [open, close, kind] :
             {std::tuple{Hook::PreForward, Hook::PostForward, TaskKind::Forward},
              std::tuple{Hook::PreBackward, Hook::PostBackward, TaskKind::Backward}}) {
            struct UnitWindow {
                int32_t unit;
                int64_t outer_start, inner_start, inner_end, outer_end;
                Label* pre;
                std::vector<Label*> posts;
            };
            std::vector<UnitWindow> windows;
            // Per unit, in time order: a pre hook takes the post hooks of its unit that start after it
            // and before the unit's next pre hook (forward: the first of them only).
            std::map<int32_t, std::pair<std::vector<Label*>, std::vector<Label*>>> hooks;
            for (Label& l : m_labels) {
                if (l.unit < 0) continue;
                if (l.hook == open) hooks[l.unit].first.push_back(&l);
                if (l.hook == close) hooks[l.unit].second.push_back(&l);
            }
            for (auto& [unit, lists] : hooks) {
                const std::vector<Label*>& pres = lists.first;
                const std::vector<Label*>& posts = lists.second;
                size_t j = 0;
                for (size_t k = 0; k < pres.size(); ++k) {
                    Label* pre = pres[k];
                    const int64_t limit = k + 1 < pres.size() ? pres[k + 1]->start : INT64_MAX;
                    while (j < posts.size() && posts[j]->start < pre->end) ++j;
                    UnitWindow w{unit, pre->start, pre->end, pre->end, pre->end, pre, {}};
                    while (j < posts.size() && posts[j]->start < limit) {
                        if (w.posts.empty()) w.inner_end = posts[j]->start;
                        w.posts.push_back(posts[j]);
                        w.outer_end = std::max(w.outer_end, posts[j]->end);
                        ++j;
                        if (kind == TaskKind::Forward) break;  // one post-forward per pre-forward
                    }
                    if (!w.posts.empty()) windows.push_back(std::move(w));
                }
            }
            std::sort(windows.begin(), windows.end(),
                      [](const UnitWindow& a, const UnitWindow& b) { return a.outer_start < b.outer_start; });
            std::map<int32_t, std::vector<std::pair<int64_t, int64_t>>> spans;
            for (const UnitWindow& w : windows) {
                // Nested windows start inside this one's compute span (windows are sorted by start).
                std::vector<std::pair<int64_t, int64_t>> inner;
                auto c = std::lower_bound(windows.begin(), windows.end(), w.inner_start,
                                          [](const UnitWindow& x, int64_t t) { return x.outer_start < t; });
                for (; c != windows.end() && c->outer_start < w.inner_end; ++c) {
                    if (&*c != &w && c->outer_end <= w.inner_end) inner.push_back({c->outer_start, c->outer_end});
                }
                w.pre->mapped = true;
                for (Label* p : w.posts) p->mapped = true;
                // With nested units, the unit's own compute is the piece before the first of them and the
                // piece after the last (the root: embedding, then norm, head and loss); the slivers
                // between nested units are the module loop's overhead, attributed to no task.
                auto pieces = gaps({w.inner_start, w.inner_end}, inner);
                if (!inner.empty() && pieces.size() > 2) pieces = {pieces.front(), pieces.back()};
                for (const auto& g : pieces) spans[w.unit].push_back(g);
            }
            for (auto& [unit, list] : spans) {
                std::sort(list.begin(), list.end());
                assign(unit, kind, list);
            }
        }
        // Prefetch labels issue a unit's unshard; root hooks bound the step.
        for (Label& l : m_labels) {
            if ((l.hook == Hook::Prefetch && (l.unit >= 0 || m_fsdp1)) || l.hook == Hook::RootPreForward ||
                l.hook == Hook::RootPostBackward || l.hook == Hook::Step) {
                l.mapped = true;
            }
        }
    }

    // Spans for the tasks of `unit` and `kind` in Program order. More spans than tasks: the last task
    // takes the rest as its busy time (from its first span's start, the sum of their durations; the
    // gaps between them are not its work). Fewer: the tasks stay unmeasured.
    void assign(int32_t unit, TaskKind kind, const std::vector<std::pair<int64_t, int64_t>>& spans) {
        const auto it = m_tasks.find({unit, kind});
        if (it == m_tasks.end()) return;
        const std::vector<int32_t>& ids = it->second;
        if (spans.size() > ids.size() && !ids.empty()) {
            // More measured pieces than tasks (a unit the lowering runs as one segment): the last
            // task takes the rest, end to end.
            for (size_t k = 0; k + 1 < ids.size(); ++k) setSpan(ids[k], {spans[k]});
            int64_t busy = 0;
            for (size_t k = ids.size() - 1; k < spans.size(); ++k) busy += spans[k].second - spans[k].first;
            const int64_t s = spans[ids.size() - 1].first;
            setSpan(ids.back(), {spans.begin() + static_cast<std::ptrdiff_t>(ids.size() - 1), spans.end()});
            m_spans[static_cast<size_t>(ids.back())] = std::pair{s, s + busy};
            return;
        }
        // Fewer pieces than tasks: one hook window spans several of the lowering's segments (whole-model
        // units), which the trace does not split; those tasks stay unmeasured rather than guessed.
        if (spans.size() < ids.size()) return;
        for (size_t k = 0; k < spans.size(); ++k) setSpan(ids[k], {spans[k]});
    }

    void setSpan(int32_t id, std::vector<std::pair<int64_t, int64_t>> pieces) {
        m_spans[static_cast<size_t>(id)] = std::pair{pieces.front().first, pieces.back().second};
        m_pieces[static_cast<size_t>(id)] = std::move(pieces);
    }

    // A GPU run: the host only queues work, so each task timed by host spans (a unit's compute between
    // its hooks, copy-in, copy-out, the optimizer step) is timed instead by the GPU work launched from
    // those spans (kernels, copies and memsets, linked to their launches by correlation): from the
    // first one's start to the last one's end on the GPU. A task that launched nothing stays unmeasured.
    void deviceSpans() {
        std::vector<std::pair<int64_t, size_t>> launched;  // (launch time, its GPU work), by time
        for (const size_t i : m_launches) {
            const Event& l = m_t.events[i];
            if (const auto it = m_device_of.find(l.correlation); it != m_device_of.end()) launched.push_back({l.ts_ns, it->second});
        }
        std::sort(launched.begin(), launched.end());
        for (size_t id = 0; id < m_program.tasks.size(); ++id) {
            if (!m_spans[id] || m_on_device[id]) continue;
            std::optional<std::pair<int64_t, int64_t>> span;
            for (const auto& [a, b] : m_pieces[id]) {
                auto it = std::lower_bound(launched.begin(), launched.end(), std::pair<int64_t, size_t>{a, 0});
                for (; it != launched.end() && it->first < b; ++it) {
                    const Event& d = m_t.events[it->second];
                    span = span ? std::pair{std::min(span->first, d.ts_ns), std::max(span->second, d.endNs())}
                                : std::pair{d.ts_ns, d.endNs()};
                }
            }
            m_spans[id] = span;
        }
    }

    // The ops of each compute task: the outermost CPU ops on a host thread that lie inside one of its
    // measured pieces (an op that only partly does, e.g. one holding a hook, is looked into), by kind.
    // Their time is the op's own on the CPU, or on a GPU run the GPU work the op launched.
    void taskOps(TraceImport& out) {
        out.task_ops.assign(m_program.tasks.size(), core::MeasuredOps{});
        struct Piece {
            int64_t start, end;
            int32_t task;
        };
        std::vector<Piece> pieces;
        for (size_t id = 0; id < m_program.tasks.size(); ++id) {
            const TaskKind k = m_program.tasks[id].kind;
            if (k != TaskKind::Forward && k != TaskKind::Backward && k != TaskKind::Recompute) continue;
            for (const auto& [a, b] : m_pieces[id]) pieces.push_back(Piece{a, b, static_cast<int32_t>(id)});
            if (m_spans[id]) out.task_ops[id].measured = true;
        }
        std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.start < b.start; });
        const auto add = [](core::MeasuredOps& m, TraceOpKind kind, int64_t ns) {
            switch (kind) {
            case TraceOpKind::Gemm: m.gemm_ns += ns; break;
            case TraceOpKind::Attention: m.attention_ns += ns; break;
            case TraceOpKind::Communication: break;
            case TraceOpKind::Other: m.other_ns += ns; break;
            }
        };
        struct Counted {
            int64_t start, end;
            int32_t task;
            TraceOpKind kind;
        };
        std::map<int64_t, std::vector<size_t>> by_thread;  // each in m_ops' order: parents first
        for (const size_t i : m_ops) by_thread[m_t.events[i].tid].push_back(i);
        std::map<int64_t, std::vector<Counted>> counted;  // per thread, in time order
        for (const auto& [tid, ops] : by_thread) {
            std::vector<std::pair<int64_t, bool>> open;  // enclosing ops: end, counted (or inside a counted one)
            for (const size_t i : ops) {
                const Event& e = m_t.events[i];
                while (!open.empty() && open.back().first <= e.ts_ns) open.pop_back();
                if (!open.empty() && open.back().second) {
                    open.emplace_back(e.endNs(), true);
                    continue;
                }
                auto p = std::upper_bound(pieces.begin(), pieces.end(), e.ts_ns, [](int64_t t, const Piece& x) { return t < x.start; });
                const bool inside = p != pieces.begin() && e.endNs() <= std::prev(p)->end;
                open.emplace_back(e.endNs(), inside);
                if (!inside) continue;
                const int32_t task = std::prev(p)->task;
                if (!out.task_ops[static_cast<size_t>(task)].measured) continue;
                const TraceOpKind kind = opKindOfTraceOp(m_t.name(e));
                if (kind == TraceOpKind::Communication) continue;
                core::MeasuredOps& m = out.task_ops[static_cast<size_t>(task)];
                if (!out.device_time) add(m, kind, e.dur_ns);
                counted[tid].push_back(Counted{e.ts_ns, e.endNs(), task, kind});
                ++m.count;
            }
        }
        if (!out.device_time) return;
        for (const size_t i : m_launches) {
            const Event& l = m_t.events[i];
            const auto work = m_device_of.find(l.correlation);
            const auto list = counted.find(l.tid);
            if (work == m_device_of.end() || list == counted.end()) continue;
            const std::vector<Counted>& c = list->second;
            auto it = std::upper_bound(c.begin(), c.end(), l.ts_ns, [](int64_t t, const Counted& x) { return t < x.start; });
            if (it == c.begin() || l.ts_ns >= std::prev(it)->end) continue;
            add(out.task_ops[static_cast<size_t>(std::prev(it)->task)], std::prev(it)->kind, m_t.events[work->second].dur_ns);
        }
    }

    // Labels on one thread nest: each label's parent is the innermost label containing it
    // (m_labels is sorted by start, the longer first, so parents come first).
    void linkParents() {
        m_parent.assign(m_labels.size(), -1);
        std::vector<int32_t> open;
        for (size_t i = 0; i < m_labels.size(); ++i) {
            while (!open.empty() && m_labels[static_cast<size_t>(open.back())].end <= m_labels[i].start) open.pop_back();
            // A label that overlaps the top one without nesting in it (clock rounding) hangs under the
            // innermost one that contains it.
            for (size_t k = open.size(); k-- > 0;) {
                if (m_labels[static_cast<size_t>(open[k])].end >= m_labels[i].end) {
                    m_parent[i] = open[k];
                    break;
                }
            }
            open.push_back(static_cast<int32_t>(i));
        }
    }

    // The innermost FSDP label on the main thread that contains [a, b] and satisfies `accept`: the
    // labels containing a point are the last label started by then and its ancestors.
    template <class Accept>
    Label* enclosingIf(int64_t a, int64_t b, Accept accept) {
        auto it = std::upper_bound(m_labels.begin(), m_labels.end(), a, [](int64_t t, const Label& l) { return t < l.start; });
        for (auto i = static_cast<int32_t>(it - m_labels.begin()) - 1; i >= 0; i = m_parent[static_cast<size_t>(i)]) {
            Label& l = m_labels[static_cast<size_t>(i)];
            if (l.start <= a && l.end >= b && accept(l)) return &l;
        }
        return nullptr;
    }
    Label* enclosing(int64_t a, int64_t b, std::initializer_list<Hook> hooks) {
        return enclosingIf(a, b, [&](const Label& l) { return std::find(hooks.begin(), hooks.end(), l.hook) != hooks.end(); });
    }

    // Each issued collective is matched with its execution: gloo runs a process group's ops one by
    // one on its thread, in issue order; NCCL kernels of one kind run in issue order.
    void collectiveSpans() {
        std::map<std::pair<int32_t, TaskKind>, std::vector<std::pair<int64_t, int64_t>>> spans;
        std::array<std::vector<size_t>, 4> nccl_by_kind;
        for (const size_t k : m_nccl) nccl_by_kind[static_cast<size_t>(collectiveKind(m_t.name(m_t.events[k])))].push_back(k);
        std::array<size_t, 4> next_nccl{};
        size_t next_gloo = 0;
        for (const size_t i : m_issues) {
            const Event& e = m_t.events[i];
            const CollKind kind = collectiveKind(m_t.name(e));
            std::optional<size_t> exec;
            if (!m_gloo.empty()) {
                if (next_gloo < m_gloo.size()) exec = m_gloo[next_gloo++];
            } else if (kind != CollKind::Other) {
                auto& list = nccl_by_kind[static_cast<size_t>(kind)];
                auto& next = next_nccl[static_cast<size_t>(kind)];
                while (next < list.size() && m_t.events[list[next]].endNs() < e.ts_ns) ++next;
                if (next < list.size()) exec = list[next++];
            }
            Label* owner = enclosing(e.ts_ns, e.endNs(), {Hook::AllGather, Hook::PostBackward, Hook::PreForward, Hook::PreBackward, Hook::Prefetch});
            if (!exec || owner == nullptr) continue;
            int32_t unit = owner->unit;
            if (m_fsdp1 && unit < 0) unit = fsdp1UnitAt(e.ts_ns, owner->hook == Hook::Prefetch);
            if (unit < 0) continue;
            // What the host issued decides the task: an all-reduce is HSDP's (or NO_SHARD's), a
            // reduce-scatter or anything issued in a post-backward hook the reduction.
            TaskKind task_kind = TaskKind::AllGather;
            if (kind == CollKind::AllReduce) {
                task_kind = TaskKind::AllReduce;
            } else if (kind == CollKind::ReduceScatter || owner->hook == Hook::PostBackward) {
                task_kind = TaskKind::ReduceScatter;
            }
            if (owner->hook == Hook::AllGather) owner->mapped = true;
            const Event& x = m_t.events[*exec];
            spans[{unit, task_kind}].push_back({x.ts_ns, x.endNs()});
        }
        for (auto& [key, list] : spans) {
            assign(key.first, key.second, list);
            if (const auto it = m_tasks.find(key); it != m_tasks.end()) {
                for (const int32_t id : it->second) m_on_device[static_cast<size_t>(id)] = 1;
            }
        }
        // An all-gather label with nothing to gather (a unit already unsharded) maps to its unit.
        for (Label& l : m_labels) {
            if (l.hook == Hook::AllGather && l.unit >= 0) l.mapped = true;
        }
    }

    // FSDP1: the unit whose hooks surround time `t` (all-gathers in pre-forward / pre-backward, reductions in post-backward).
    // FSDP1: the unit whose hook surrounds time `t`; for an all-gather its prefetch issues there, the
    // unit after it: in forward order in a pre-forward hook, in backward order in a backward hook.
    int32_t fsdp1UnitAt(int64_t t, bool prefetch) {
        const Label* l = enclosingIf(t, t, [](const Label& x) { return x.unit >= 0; });
        if (l == nullptr) return -1;
        if (!prefetch) return l->unit;
        if (l->hook == Hook::PreForward) {
            return l->unit + 1 < static_cast<int32_t>(m_program.units.size()) ? l->unit + 1 : -1;
        }
        const auto at = std::find(m_backward_order.begin(), m_backward_order.end(), l->unit);
        return at != m_backward_order.end() && at + 1 != m_backward_order.end() ? *(at + 1) : -1;
    }

    void copySpans() {
        std::map<int32_t, std::vector<std::pair<int64_t, int64_t>>> copy_out, copy_in;
        for (Label& l : m_labels) {
            if (l.hook != Hook::CopyOut || l.unit < 0) continue;
            copy_out[l.unit].push_back({l.start, l.end});
            l.mapped = true;
        }
        for (const size_t i : m_copy_in) {
            const Event& e = m_t.events[i];
            const Label* owner = enclosing(e.ts_ns, e.endNs(), {Hook::AllGather});
            if (owner != nullptr && owner->unit >= 0) copy_in[owner->unit].push_back({e.ts_ns, e.endNs()});
        }
        for (auto& [unit, list] : copy_out) assign(unit, TaskKind::CopyOut, list);
        for (auto& [unit, list] : copy_in) assign(unit, TaskKind::CopyIn, list);
    }

    void optimizerSpans() {
        std::vector<std::pair<int64_t, int64_t>> list;
        for (const size_t i : m_optimizer) list.push_back({m_t.events[i].ts_ns, m_t.events[i].endNs()});
        assign(-1, TaskKind::OptimizerStep, list);
    }

    void buildTimeline(TraceImport& out) {
        core::Timeline& tl = out.run.timeline;
        tl.tasks.resize(m_program.tasks.size());
        std::map<std::string, int64_t> unmeasured;
        int64_t last_end = 0;
        const int64_t step = m_window.end - m_window.start;
        for (size_t id = 0; id < m_program.tasks.size(); ++id) {
            const core::Task& task = m_program.tasks[id];
            core::TaskTime& tt = tl.tasks[id];
            tt.stream = task.stream;
            if (m_spans[id]) {
                tt.start_ns = std::clamp<int64_t>(m_spans[id]->first - m_window.start, 0, INT64_MAX / 4);
                tt.end_ns = std::max(tt.start_ns, m_spans[id]->second - m_window.start);
                last_end = tt.end_ns;
                ++out.measured_tasks;
            } else {
                tt.start_ns = tt.end_ns = std::min(last_end, step);
                out.run.unmeasured_tasks.push_back(static_cast<int32_t>(id));
                ++unmeasured[std::string(core::taskKindName(task.kind))];
            }
            tl.stream_busy_ns[static_cast<size_t>(task.stream)] += tt.durationNs();
        }
        for (const auto& [kind, n] : unmeasured) out.unmeasured_by_kind.push_back(LabelCount{kind, n});
        tl.step_ns = step;
    }

    const RankTrace& m_t;
    const core::Program& m_program;
    Window m_window;
    std::pair<int64_t, int64_t> m_main;
    std::set<int64_t> m_host;  // the host threads of the step (onMain)
    std::unordered_map<std::string, int32_t> m_unit_of;

    // The Program unit a label names, -1 when none. A PEFT model (LoRA) is the FSDP root around the
    // model, so its labels name "base_model.model." + the model's module names.
    int32_t unitNamed(std::string_view name) const {
        constexpr std::string_view kPeftPrefix = "base_model.model.";
        if (const auto it = m_unit_of.find(std::string(name)); it != m_unit_of.end()) return it->second;
        if (name.starts_with(kPeftPrefix)) {
            if (const auto it = m_unit_of.find(std::string(name.substr(kPeftPrefix.size()))); it != m_unit_of.end()) {
                return it->second;
            }
        }
        return -1;
    }
    std::map<std::pair<int32_t, TaskKind>, std::vector<int32_t>> m_tasks;
    std::vector<std::optional<std::pair<int64_t, int64_t>>> m_spans;
    std::vector<std::vector<std::pair<int64_t, int64_t>>> m_pieces;  // per task: the measured pieces of its span
    std::vector<Label> m_labels;  // in time order (start, the longer first)
    std::vector<int32_t> m_parent;  // per label: the innermost label containing it, -1: none
    std::vector<size_t> m_issues, m_copy_in, m_gloo, m_nccl, m_optimizer;
    std::vector<size_t> m_ops;  // CPU ops on the host threads, parents first
    std::vector<size_t> m_launches;  // launches on the host threads that queued GPU work, in time order
    std::unordered_map<int64_t, size_t> m_device_of;  // correlation -> its kernel, copy or memset (NCCL's aside)
    std::vector<char> m_on_device;  // per task: its span is already GPU time (a collective's kernel)
    bool m_fsdp1 = false;
    std::vector<int32_t> m_backward_order;  // FSDP1: units in pre-backward hook order (the root first)
};

// Memory of the recorded step from the [memory] events: the device's Total Allocated. CUDA's
// allocator reports its own totals (absolute). The CPU totals count only what the profiler saw
// allocated and drift across steps (frees it does not see), so a CPU step is measured by its peak's
// rise above the level it started from, whatever the schedule.
void importMemory(const RankTrace& t, const Window& w, TraceImport& out) {
    const bool any_cuda = std::any_of(t.memory.begin(), t.memory.end(), [](const MemoryEvent& m) { return m.device_type == 1; });
    const int32_t device_type = any_cuda ? 1 : 0;
    std::vector<const MemoryEvent*> events;
    for (const MemoryEvent& m : t.memory) {
        if (m.device_type == device_type) events.push_back(&m);
    }
    std::stable_sort(events.begin(), events.end(), [](const MemoryEvent* a, const MemoryEvent* b) { return a->ts_ns < b->ts_ns; });
    core::TimedMemory& mem = out.run.memory;
    bool any = false;
    std::optional<int64_t> start_level;
    std::vector<core::TotalPoint> curve;
    for (const MemoryEvent* m : events) {
        if (m->ts_ns < w.start) {
            start_level = m->total_allocated;
            continue;
        }
        if (m->ts_ns >= w.end) break;
        if (!start_level) start_level = std::max<int64_t>(0, m->total_allocated - m->bytes);
        if (!any || m->total_allocated > mem.peak_bytes) {
            mem.peak_bytes = m->total_allocated;
            mem.peak_time_ns = m->ts_ns - w.start;
        }
        curve.push_back(core::TotalPoint{m->ts_ns - w.start, m->total_allocated});
        any = true;
    }
    if (!any) {
        out.run.memory_kind = core::RunRecord::MemoryKind::None;
        out.notes.push_back("no [memory] events in the step (profile_memory=False): no measured memory");
        return;
    }
    if (device_type == 1) {
        out.run.memory_kind = core::RunRecord::MemoryKind::Total;
        out.run.memory_total_curve = core::thinCurve(curve, core::kMaxTotalCurvePoints);
        return;
    }
    out.run.memory_kind = core::RunRecord::MemoryKind::Rise;
    out.notes.push_back(fmt::format(
        "CPU memory: [memory] totals count only what the profiler saw allocated, so the step is measured by its peak's "
        "rise above its start ({:.3f} MiB at the start, {:.3f} MiB at the peak)",
        static_cast<double>(*start_level) / static_cast<double>(1 << 20),
        static_cast<double>(mem.peak_bytes) / static_cast<double>(1 << 20)));
    mem.peak_bytes = std::max<int64_t>(0, mem.peak_bytes - *start_level);
    for (core::TotalPoint& p : curve) p.bytes = std::max<int64_t>(0, p.bytes - *start_level);
    out.run.memory_total_curve = core::thinCurve(curve, core::kMaxTotalCurvePoints);
}

}  // namespace

Result<TraceImport> importTraces(const std::vector<RankTrace>& traces, const core::Program& program,
                                 const ImportOptions& options) {
    if (traces.empty()) return core::makeError("no trace files given");
    std::map<int32_t, const RankTrace*> by_rank;
    for (size_t i = 0; i < traces.size(); ++i) {
        const RankTrace& t = traces[i];
        const int32_t rank = t.rank.value_or(static_cast<int32_t>(i));
        if (t.world_size && *t.world_size != program.world_size) {
            return core::makeError(fmt::format(
                "{}: the trace is of a run of {} ranks (distributedInfo.world_size) but the plan has {}: pass the plan "
                "the run trained with",
                t.path.string(), *t.world_size, program.world_size));
        }
        if (rank >= program.world_size) {
            return core::makeError(fmt::format("{}: rank {} is not a rank of the plan's {} ranks", t.path.string(), rank,
                                               program.world_size));
        }
        if (!by_rank.emplace(rank, &t).second) {
            return core::makeError(fmt::format("{} and {} are both rank {}: give one file per rank",
                                               by_rank[rank]->path.string(), t.path.string(), rank));
        }
    }
    const auto rec = by_rank.find(options.rank);
    if (rec == by_rank.end()) {
        return core::makeError(fmt::format("no trace of rank {} among the {} files given (ranks {})", options.rank,
                                           traces.size(), fmt::join([&] {
                                               std::vector<int32_t> r;
                                               for (const auto& [k, v] : by_rank) r.push_back(k);
                                               return r;
                                           }(), ", ")));
    }
    const RankTrace& t = *rec->second;
    const auto main = mainThread(t);
    if (!main) {
        return core::makeError(fmt::format(
            "{}: no FSDP labels and no ProfilerStep#N: not a torch.profiler trace of an FSDP run (record_function "
            "labels are needed; they are on by default)",
            t.path.string()));
    }
    const std::vector<Window> steps = stepWindows(t, *main);
    if (steps.empty()) {
        return core::makeError(fmt::format(
            "{}: no complete training step (a ProfilerStep#N span, or a root pre-forward followed by an optimizer step)",
            t.path.string()));
    }
    Window chosen;
    if (options.step) {
        const auto it = std::find_if(steps.begin(), steps.end(), [&](const Window& w) { return w.number == *options.step; });
        if (it == steps.end()) {
            std::vector<int64_t> numbers;
            for (const Window& w : steps) numbers.push_back(w.number);
            return core::makeError(fmt::format("{}: no step {} (the trace has steps {})", t.path.string(), *options.step,
                                               fmt::join(numbers, ", ")));
        }
        chosen = *it;
    } else {
        // The first step of a run is not steady (the optimizer makes its state, allocators warm up):
        // it is recorded only when it is the only one.
        std::vector<Window> sorted(steps.begin() + (steps.size() > 1 && steps[0].number == 0 ? 1 : 0), steps.end());
        std::sort(sorted.begin(), sorted.end(), [](const Window& a, const Window& b) {
            return a.end - a.start != b.end - b.start ? a.end - a.start < b.end - b.start : a.number < b.number;
        });
        chosen = sorted[(sorted.size() - 1) / 2];
    }

    Importer importer(t, program, chosen, *main);
    auto out = importer.run();
    if (!out) return out.error();
    out->step_number = chosen.number;
    out->run.backend = "torch";
    out->run.world_size = program.world_size;
    out->run.recorded_rank = options.rank;
    // The run's first step, left out of the median when others follow, is its warm-up.
    const size_t first = steps.size() > 1 && steps[0].number == 0 ? 1 : 0;
    out->run.warmup_steps = static_cast<int32_t>(first);
    for (size_t i = first; i < steps.size(); ++i) {
        if (steps[i].number == chosen.number) out->run.median_step = static_cast<int32_t>(out->run.step_ns.size());
        out->run.step_ns.push_back(steps[i].end - steps[i].start);
    }
    if (options.step && chosen.number == steps[0].number && first == 1) {
        // --step 0 asked for the warm-up step itself.
        out->run.warmup_steps = 0;
        out->run.step_ns.insert(out->run.step_ns.begin(), steps[0].end - steps[0].start);
        out->run.median_step = 0;
    }
    importMemory(t, chosen, *out);

    // The same step on every rank: its duration, for stragglers; files of another run do not line up.
    const int64_t tolerance = std::max<int64_t>(int64_t{2'000'000'000}, 2 * (chosen.end - chosen.start));
    for (const auto& [rank, other] : by_rank) {
        const auto m = mainThread(*other);
        if (!m) return core::makeError(fmt::format("{}: no FSDP labels (rank {})", other->path.string(), rank));
        const std::vector<Window> w = stepWindows(*other, *m);
        const auto it = std::find_if(w.begin(), w.end(), [&](const Window& x) { return x.number == chosen.number; });
        if (it == w.end()) {
            return core::makeError(fmt::format("{}: rank {} has no step {} that rank {} recorded: files of different runs?",
                                               other->path.string(), rank, chosen.number, options.rank));
        }
        if (std::llabs(it->start - chosen.start) > tolerance) {
            return core::makeError(fmt::format(
                "{}: rank {}'s step {} starts {:.1f} s from rank {}'s: the files are of different runs",
                other->path.string(), rank, chosen.number, static_cast<double>(std::llabs(it->start - chosen.start)) / 1e9,
                options.rank));
        }
        out->ranks.push_back(RankSteps{rank, it->end - it->start});
    }
    if (static_cast<int32_t>(by_rank.size()) < program.world_size) {
        out->notes.push_back(fmt::format("{} of {} ranks' traces given: stragglers are judged among those only",
                                         by_rank.size(), program.world_size));
    }
    return out;
}

Result<std::vector<std::filesystem::path>> traceFiles(const std::vector<std::string>& args) {
    namespace fs = std::filesystem;
    std::vector<fs::path> out;
    for (const std::string& a : args) {
        std::error_code ec;
        const fs::path p(a);
        if (fs::is_directory(p, ec)) {
            std::vector<fs::path> found;
            for (const auto& entry : fs::directory_iterator(p, ec)) {
                const std::string name = entry.path().filename().string();
                if (entry.is_regular_file(ec) && (name.ends_with(".json") || name.ends_with(".json.gz")) &&
                    name.find("trace") != std::string::npos) {
                    found.push_back(entry.path());
                }
            }
            if (found.empty()) {
                for (const auto& entry : fs::directory_iterator(p, ec)) {
                    const std::string name = entry.path().filename().string();
                    if (entry.is_regular_file(ec) && name.ends_with(".json.gz")) found.push_back(entry.path());
                }
            }
            if (ec) return core::makeError(fmt::format("{}: cannot list the directory: {}", a, ec.message()));
            if (found.empty()) {
                return core::makeError(fmt::format("{}: no trace files in the directory (*.json.gz, or *trace*.json)", a));
            }
            std::sort(found.begin(), found.end());
            out.insert(out.end(), found.begin(), found.end());
        } else if (fs::exists(p, ec)) {
            out.push_back(p);
        } else {
            return core::makeError(fmt::format("{}: no such file or directory", a));
        }
    }
    return out;
}

TraceOpKind opKindOfTraceOp(std::string_view name) {
    if (name.starts_with("c10d::") || name.starts_with("nccl:") || name.starts_with("gloo:") || name.starts_with("fsdp::") ||
        name.starts_with("FSDP::") || name == "record_param_comms") {
        return TraceOpKind::Communication;
    }
    // A backward node: "autograd::engine::evaluate_function: MmBackward0" (its kernels inside it).
    constexpr std::string_view kNode = "autograd::engine::evaluate_function: ";
    const std::string_view op = name.starts_with(kNode) ? name.substr(kNode.size()) : name;
    const auto has = [&](std::string_view needle) { return op.find(needle) != std::string_view::npos; };
    if (has("scaled_dot_product") || has("ScaledDotProduct") || has("flash_attention") || has("FlashAttention") ||
        has("efficient_attention") || has("EfficientAttention") || has("cudnn_attention") || has("CudnnAttention")) {
        return TraceOpKind::Attention;
    }
    for (const std::string_view g : {"aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                                     "aten::addmv", "aten::mv", "aten::_addmm_activation"}) {
        if (op == g) return TraceOpKind::Gemm;
    }
    for (const std::string_view g : {"MmBackward", "AddmmBackward", "BmmBackward", "BaddbmmBackward", "LinearBackward",
                                     "MvBackward", "AddmvBackward"}) {
        if (op.starts_with(g)) return TraceOpKind::Gemm;
    }
    return TraceOpKind::Other;
}

}  // namespace shardcast::trace
