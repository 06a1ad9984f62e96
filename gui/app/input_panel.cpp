#include "gui/app/input_panel.hpp"

#include <algorithm>
#include <limits>

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include "core/model/model_io.hpp"
#include "core/plan/cluster.hpp"
#include "core/plan/sharding.hpp"
#include "core/plan/training.hpp"
#include "gui/widgets/palette.hpp"

namespace shardcast::gui {

namespace {

constexpr const char* kDocumentedFigures = "(documented figures)";

QString reshardText(const core::ShardingSpec& s) {
    switch (s.reshard_after_forward) {
        case core::ReshardMode::Default: return "default";
        case core::ReshardMode::True: return "true";
        case core::ReshardMode::False: return "false";
        case core::ReshardMode::Count: return QString::number(s.reshard_after_forward_k);
    }
    return "default";
}

// Where `needle` occurs in `text` as a whole flag or field name (not a prefix of a longer one).
qsizetype wholeIndex(const QString& text, const QString& needle) {
    qsizetype from = 0;
    while (true) {
        const qsizetype at = text.indexOf(needle, from);
        if (at < 0) return -1;
        const qsizetype end = at + needle.size();
        const bool boundary = end >= text.size() || !(text[end].isLetterOrNumber() || text[end] == '-' || text[end] == '_');
        if (boundary) return at;
        from = at + 1;
    }
}

QLabel* makeErrorLabel() {
    auto* l = new QLabel;
    l->setStyleSheet("color: #c0392b;");
    l->setWordWrap(true);
    l->hide();
    return l;
}

}  // namespace

InputPanel::InputPanel(QWidget* parent) : QWidget(parent) {
    auto* outer = new QVBoxLayout(this);
    m_general_error = makeErrorLabel();
    outer->addWidget(m_general_error);

    auto group = [outer](const QString& title) {
        auto* box = new QGroupBox(title);
        auto* form = new QFormLayout(box);
        form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
        outer->addWidget(box);
        return form;
    };

    // Model: the bundled list with parameter counts, or a file.
    QFormLayout* model = group("Model");
    m_model = new QComboBox;
    for (const std::string& name : core::bundledModelNames()) {
        auto m = core::resolveModel(name);
        const QString label = m ? QString("%1  (%2 B params)").arg(toQString(name)).arg(static_cast<double>(m->numParams()) / 1e9, 0, 'f', 2)
                                : toQString(name);
        m_model->addItem(label, toQString(name));
    }
    auto* model_row = new QWidget;
    auto* model_layout = new QHBoxLayout(model_row);
    model_layout->setContentsMargins(0, 0, 0, 0);
    model_layout->addWidget(m_model, 1);
    auto* open_model = new QPushButton("Open...");
    open_model->setToolTip("Open a HuggingFace config.json or a shardcast module-tree JSON.");
    model_layout->addWidget(open_model);
    Knob& mk = addKnob(model, "model", "", "model",
                       "The model to train: a bundled config or a HuggingFace config.json (AutoConfig.from_pretrained).",
                       model_row);
    mk.text = [this] {
        const QVariant item = m_model->currentData();
        return item.isValid() ? item.toString() : m_model->currentText();
    };
    mk.set = [this](const QString& v) {
        int i = m_model->findData(v);
        if (i < 0) {
            m_model->addItem(QFileInfo(v).fileName(), v);
            i = m_model->count() - 1;
        }
        m_model->setCurrentIndex(i);
    };
    connect(m_model, &QComboBox::currentIndexChanged, this, &InputPanel::emitChanged);
    connect(open_model, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, "Open model config", {}, "JSON (*.json)");
        if (!path.isEmpty()) openModelFile(path);
    });

    QStringList gpus;
    for (const core::GpuSpec& g : core::gpuPresets()) gpus << toQString(g.name);
    QFormLayout* cluster = group("Cluster");
    addCombo(cluster, "gpu", "cluster.gpu", "GPU",
             "The GPU preset, or a path to a GPU JSON, whose memory and speed the plan uses "
             "(torch.cuda.get_device_name).",
             gpus, true);
    {
        auto* box = new QComboBox;
        box->setEditable(true);
        box->addItem(kDocumentedFigures);
        Knob& k = addKnob(cluster, "profile", "", "hardware profile",
                          "The figures the plan is timed with: the GPU's documented ones, a profile stored by "
                          "`shardcast calibrate --save NAME`, or a profile JSON path (shardcast's --profile; "
                          "PyTorch has no such setting).",
                          box);
        k.text = [box] { return box->currentText() == kDocumentedFigures ? QString() : box->currentText(); };
        k.set = [box](const QString& v) {
            int i = v.isEmpty() ? 0 : box->findText(v, Qt::MatchFixedString);
            if (i < 0) {
                box->addItem(v);
                i = box->count() - 1;
            }
            box->setCurrentIndex(i);
        };
        connect(box, &QComboBox::currentIndexChanged, this, &InputPanel::emitChanged);
        connect(box->lineEdit(), &QLineEdit::editingFinished, this, [box] {
            if (box->findText(box->currentText(), Qt::MatchFixedString) < 0) {
                box->addItem(box->currentText());
                box->setCurrentIndex(box->count() - 1);
            }
        });
    }
    addSpin(cluster, "nodes", "cluster.nodes", "nodes", "Machines in the job (torchrun --nnodes).", 1, 131072);
    addSpin(cluster, "gpus-per-node", "cluster.gpus_per_node", "GPUs per node",
            "GPUs used on each machine (torchrun --nproc-per-node).", 1, 64);

    QFormLayout* training = group("Training");
    addSpin(training, "micro-batch", "training.micro_batch", "micro-batch",
            "Sequences per GPU per forward pass (the DataLoader's batch_size).", 1, 65536);
    addSpin(training, "seq-len", "training.seq_len", "sequence length",
            "Tokens per sequence (the input_ids' second dimension).", 1, 16777216);
    addSpin(training, "grad-accum", "training.grad_accum", "grad accumulation",
            "Micro-batches per optimizer step (gradient accumulation steps).", 1, 4096);
    {
        auto* box = new QCheckBox("reduce on the last only");
        Knob& k = addKnob(training, "no-sync", "training.no_sync", "no_sync",
                          "Skip gradient reduction on all but the last micro-batch (FSDP's no_sync() / "
                          "set_requires_gradient_sync(False)).",
                          box);
        k.text = [box] { return box->isChecked() ? QString("true") : QString("false"); };
        k.set = [box](const QString& v) { box->setChecked(v == "true"); };
        connect(box, &QCheckBox::toggled, this, &InputPanel::emitChanged);
    }
    addCombo(training, "param-dtype", "training.param_dtype", "param dtype",
             "The dtype forward and backward compute in (MixedPrecisionPolicy.param_dtype).", {"bf16", "fp16", "fp32"},
             false);
    addCombo(training, "reduce-dtype", "training.reduce_dtype", "reduce dtype",
             "The dtype gradients are reduced in (MixedPrecisionPolicy.reduce_dtype).", {"fp32", "bf16", "fp16"}, false);
    addCombo(training, "master-dtype", "training.master_dtype", "master dtype",
             "The dtype of the sharded parameters, gradients and optimizer state (the model's dtype before "
             "fully_shard).",
             {"fp32", "bf16"}, false);
    addCombo(training, "optimizer", "training.optimizer", "optimizer",
             "The optimizer whose state is kept per parameter (torch.optim.AdamW, SGD): adamw is AdamW's foreach "
             "implementation (PyTorch's default), adamw-fused AdamW(fused=True) (torchtitan's and HF Trainer's).",
             {"adamw", "adamw-fused", "sgd", "sgd-momentum"}, false);
    addCombo(training, "ac", "training.ac", "activation checkpointing",
             "Recompute activations in backward (torch.utils.checkpoint): full = every block, layer:K = every K-th "
             "block (torchtitan's selective layer AC), op = torchtitan's per-op selective AC, attn-core = Megatron's "
             "attention-core recompute.",
             {"none", "full", "layer:2", "layer:4", "op", "attn-core"}, true);
    addCombo(training, "attention", "training.attention", "attention",
             "The attention kernel (F.scaled_dot_product_attention with flash, or eager matmul + softmax).",
             {"flash", "eager"}, false);
    addCombo(training, "kernels", "training.kernels", "kernels",
             "Elementwise kernels: one per PyTorch op (eager), hand-fused (fused), or each chain between matmuls "
             "fused by torch.compile (compile).",
             {"eager", "fused", "compile"}, false);
    addCombo(training, "impl", "training.impl", "modeling code",
             "HuggingFace transformers modules (hf) or torchtitan's own Llama (torchtitan).", {"hf", "torchtitan"},
             false);
    addCombo(training, "offload", "training.offload", "offload",
             "Keep sharded parameters, gradients and optimizer state on the host (CPUOffloadPolicy).",
             {"none", "cpu"}, false);
    addLine(training, "frozen", "training.frozen", "frozen (regex)",
            "Parameters whose name matches are frozen (param.requires_grad = False).");
    addCombo(training, "all-gather-dtype", "training.all_gather_dtype", "all-gather dtype",
             "What FSDP2 all-gathers: parameters in param_dtype, or fp8 (torchao float8 training with "
             "enable_fsdp_float8_all_gather: linear weights gathered and held in fp8, their GEMMs in fp8).",
             {"param", "fp8"}, false);
    addLine(training, "lora", "training.lora", "LoRA (rank[:modules])",
            "LoRA fine-tuning as PEFT applies it: RANK or RANK:MODULE,MODULE (PEFT's target_modules; default the "
            "attention projections); every other parameter frozen. 0: none.");
    addLine(training, "clip-grad-norm", "training.clip_grad_norm", "clip grad norm",
            "clip_grad_norm_(max_norm) before each optimizer step: a pass over the gradients for their norm, its "
            "all-reduce, and a pass that scales them (torchtitan and HF Trainer clip at 1.0); 0: no clipping.");
    addCombo(training, "checkpoint", "checkpoint.mode", "checkpoint saves",
             "Plan checkpoint saves: full (FULL_STATE_DICT gathered on rank 0) or sharded (torch.distributed.checkpoint, "
             "every rank writes its shards): rank 0's memory, the save time and the goodput against failures.",
             {"none", "full", "sharded"}, false);
    addSpin(training, "checkpoint-every", "checkpoint.every_steps", "save every (steps)",
            "Optimizer steps between checkpoint saves (torchtitan's checkpoint.interval, 500 by default).", 1, 100'000'000);
    addCombo(training, "checkpoint-offload-to-cpu", "checkpoint.offload_to_cpu", "full save offload to CPU",
             "Full save: each gathered tensor goes to the host at once (FullStateDictConfig offload_to_cpu).",
             {"false", "true"}, false);

    QFormLayout* sharding = group("Sharding");
    addCombo(sharding, "strategy", "sharding.strategy", "strategy",
             "How parameters, gradients and optimizer state are sharded (FSDP's ShardingStrategy).",
             {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"}, false);
    addSpin(sharding, "shard-size", "sharding.shard_size", "shard size",
            "Ranks each parameter is sharded over (the shard dimension of init_device_mesh).", 0, 1048576,
            "default");
    addSpin(sharding, "tp", "sharding.tp", "tensor parallel",
            "Tensor-parallel degree: torchtitan's Llama plan (Megatron-LM's for GPT-2) over this many consecutive ranks "
            "inside a node, then fully_shard over the rest (the tp dimension of init_device_mesh).",
            1, 1024, "");
    addCombo(sharding, "sequence-parallel", "sharding.sequence_parallel", "sequence parallel",
             "With tensor parallelism: norms and residual adds on sequence shards (SequenceParallel).",
             {"true", "false"}, false);
    addCombo(sharding, "loss-parallel", "sharding.loss_parallel", "loss parallel",
             "With tensor parallelism: cross-entropy on vocab-sharded logits (loss_parallel), torchtitan's default.",
             {"true", "false"}, false);
    addCombo(sharding, "async-tp", "sharding.async_tp", "async TP",
             "With tensor parallelism, sequence parallelism and kernels compile: torch._inductor's micro-pipelined TP "
             "(each all-gather overlapped with the matmuls that read it, each reduce-scatter with the one that feeds it).",
             {"false", "true"}, false);
    addSpin(sharding, "pp", "sharding.pp", "pipeline stages",
            "Pipeline stages (torch.distributed.pipelining), the outermost dimension of init_device_mesh; the step's "
            "micro-batches (grad accum) run through them, fully_shard inside each stage.",
            1, 1024, "");
    addCombo(sharding, "pp-schedule", "sharding.pp_schedule", "pipeline schedule",
             "With pipeline stages: the schedule (GPipe: every forward, then every backward; 1F1B: warm-up forwards, "
             "then one backward and one forward alternately; Interleaved1F1B: 1F1B over several stages per rank).",
             {"1F1B", "GPipe", "Interleaved1F1B"}, false);
    addSpin(sharding, "pp-virtual-stages", "sharding.pp_virtual_stages", "stages per rank",
            "With Interleaved1F1B: the stages each pipeline rank holds (torchtitan's stages per rank); the blocks "
            "split into pipeline stages x this, rank r holding stages r, r + pp, ...",
            1, 64, "");
    addCombo(sharding, "fsdp", "sharding.fsdp", "FSDP version",
             "FSDP2 (torch.distributed.fsdp.fully_shard) or FSDP1 (FullyShardedDataParallel).", {"2", "1"}, false);
    addCombo(sharding, "wrap", "sharding.wrap", "wrap policy",
             "Which modules become FSDP units (fully_shard per module, or FSDP1's auto_wrap_policy).",
             {"block", "whole", "every:2", "every:4", "min-params:100000000"}, true);
    addCombo(sharding, "reshard-after-forward", "sharding.reshard_after_forward", "reshard after forward",
             "Free unsharded parameters after forward (fully_shard(reshard_after_forward=...)); K keeps a slice "
             "on K ranks.",
             {"default", "true", "false"}, true);
    addSpin(sharding, "prefetch-depth", "sharding.prefetch_depth", "prefetch depth",
            "FSDP2 units whose all-gather runs ahead: 1 is the implicit prefetch, N > 1 adds N-1 "
            "(FSDPModule.set_modules_to_forward_prefetch / set_modules_to_backward_prefetch).",
            1, 1024);
    addCombo(sharding, "forward-prefetch", "sharding.forward_prefetch", "forward prefetch",
             "FSDP1: issue the next unit's all-gather before this unit's forward (FullyShardedDataParallel("
             "forward_prefetch=True)).",
             {"false", "true"}, false);
    addCombo(sharding, "backward-prefetch", "sharding.backward_prefetch", "backward prefetch",
             "FSDP1: when the next unit's all-gather is issued in backward (BackwardPrefetch.BACKWARD_PRE, "
             "BACKWARD_POST, or None).",
             {"pre", "post", "none"}, false);
    outer->addStretch(1);
}

InputPanel::Knob& InputPanel::addKnob(QFormLayout* form, const QString& key, const QString& field,
                                      const QString& label, const QString& tooltip, QWidget* editor) {
    auto* cell = new QWidget;
    auto* v = new QVBoxLayout(cell);
    v->setContentsMargins(0, 0, 0, 0);
    v->setSpacing(1);
    v->addWidget(editor);
    QLabel* error = makeErrorLabel();
    error->setObjectName("error-" + key);
    v->addWidget(error);
    editor->setToolTip(tooltip);
    editor->setObjectName("knob-" + key);
    auto* l = new QLabel(label);
    l->setToolTip(tooltip);
    form->addRow(l, cell);
    m_knobs.push_back(Knob{key, field, editor, error, {}, {}, {}});
    return m_knobs.back();
}

void InputPanel::addCombo(QFormLayout* form, const QString& key, const QString& field, const QString& label,
                          const QString& tooltip, const QStringList& items, bool editable) {
    auto* box = new QComboBox;
    box->addItems(items);
    box->setEditable(editable);
    Knob& k = addKnob(form, key, field, label, tooltip, box);
    k.text = [box] { return box->currentText(); };
    k.set = [box](const QString& v) {
        int i = box->findText(v, Qt::MatchFixedString);
        if (i < 0) {
            box->addItem(v);
            i = box->count() - 1;
        }
        box->setCurrentIndex(i);
    };
    connect(box, &QComboBox::currentIndexChanged, this, &InputPanel::emitChanged);
    if (editable) {
        connect(box->lineEdit(), &QLineEdit::editingFinished, this, [this, box] {
            if (box->findText(box->currentText(), Qt::MatchFixedString) < 0) {
                box->addItem(box->currentText());
                box->setCurrentIndex(box->count() - 1);
            } else {
                emitChanged();
            }
        });
    }
}

void InputPanel::addSpin(QFormLayout* form, const QString& key, const QString& field, const QString& label,
                         const QString& tooltip, int min, int max, const QString& special) {
    auto* spin = new QSpinBox;
    spin->setRange(min, max);
    spin->setKeyboardTracking(false);
    if (!special.isEmpty()) spin->setSpecialValueText(special);
    Knob& k = addKnob(form, key, field, label, tooltip, spin);
    k.text = [spin] { return QString::number(spin->value()); };
    k.set = [spin](const QString& v) { spin->setValue(v.toInt()); };
    connect(spin, &QSpinBox::valueChanged, this, &InputPanel::emitChanged);
}

void InputPanel::addLine(QFormLayout* form, const QString& key, const QString& field, const QString& label,
                         const QString& tooltip) {
    auto* edit = new QLineEdit;
    Knob& k = addKnob(form, key, field, label, tooltip, edit);
    k.text = [edit] { return edit->text(); };
    k.set = [edit](const QString& v) { edit->setText(v); };
    connect(edit, &QLineEdit::editingFinished, this, &InputPanel::emitChanged);
}

const InputPanel::Knob* InputPanel::find(const QString& key) const {
    for (const Knob& k : m_knobs) {
        if (k.key == key) return &k;
    }
    return nullptr;
}

InputPanel::Knob* InputPanel::find(const QString& key) {
    return const_cast<Knob*>(static_cast<const InputPanel*>(this)->find(key));
}

void InputPanel::emitChanged() {
    if (m_updating == 0) emit changed();
}

core::Status InputPanel::setBasePlan(const QString& path) {
    auto plan = core::loadPlanFile(path.toStdString());
    if (!plan) return plan.error();
    ++m_updating;
    fillFromPlan(*plan);
    for (Knob& k : m_knobs) k.baseline = k.text();
    m_base_path = path;
    --m_updating;
    emitChanged();
    return core::Ok{};
}

void InputPanel::fillFromPlan(const core::Plan& p) {
    const core::TrainingSpec& t = p.training;
    const core::ShardingSpec& s = p.sharding;
    auto set = [this](const QString& key, const QString& v) { find(key)->set(v); };
    set("model", toQString(p.model_ref));
    set("gpu", toQString(p.cluster.gpu.name));
    set("nodes", QString::number(p.cluster.nodes));
    set("gpus-per-node", QString::number(p.cluster.gpus_per_node));
    set("micro-batch", QString::number(t.micro_batch));
    set("seq-len", QString::number(t.seq_len));
    set("grad-accum", QString::number(t.grad_accum));
    set("no-sync", t.no_sync ? "true" : "false");
    set("param-dtype", toQString(core::dtypeName(t.computeDtype())));
    set("reduce-dtype", toQString(core::dtypeName(t.reduceDtype())));
    set("master-dtype", toQString(core::dtypeName(t.master_dtype)));
    set("optimizer", toQString(core::optimizerName(t.optimizer)));
    set("ac", toQString(core::acString(core::acSpecOf(t))));
    set("attention", toQString(core::attentionName(t.attention)));
    set("kernels", toQString(core::kernelImplName(t.kernels)));
    set("impl", toQString(core::modelImplName(t.impl)));
    set("offload", toQString(core::offloadName(t.offload)));
    set("frozen", toQString(t.frozen_regex));
    set("lora", toQString(core::loraString(t.lora)));
    set("all-gather-dtype", toQString(core::allGatherDtypeName(t.all_gather_dtype)));
    set("clip-grad-norm", QString::number(t.clip_grad_norm, 'g', 17));
    set("checkpoint", toQString(core::checkpointModeName(p.checkpoint.mode)));
    set("checkpoint-every", QString::number(p.checkpoint.every_steps));
    set("checkpoint-offload-to-cpu", p.checkpoint.offload_to_cpu ? "true" : "false");
    set("strategy", toQString(core::strategyName(s.strategy)));
    set("shard-size", QString::number(s.shard_size));
    set("tp", QString::number(s.tp));
    set("sequence-parallel", s.sequence_parallel ? "true" : "false");
    set("loss-parallel", s.loss_parallel ? "true" : "false");
    set("async-tp", s.async_tp ? "true" : "false");
    set("pp", QString::number(s.pp));
    set("pp-schedule", toQString(core::ppScheduleName(s.pp_schedule)));
    set("pp-virtual-stages", QString::number(s.pp_virtual_stages));
    set("fsdp", QString::number(s.fsdp_version));
    set("wrap", toQString(core::wrapPolicyString(s.wrap)));
    set("reshard-after-forward", reshardText(s));
    set("prefetch-depth", QString::number(std::max(1, s.prefetch_depth)));
    set("forward-prefetch", s.forward_prefetch ? "true" : "false");
    set("backward-prefetch", toQString(core::backwardPrefetchName(s.backward_prefetch)));
}

core::PlanOverrides InputPanel::overrides() const {
    core::PlanOverrides o;
    o.plan_file = m_base_path.toStdString();
    const bool has_base = !m_base_path.isEmpty();
    for (const Knob& k : m_knobs) {
        const QString v = k.text();
        if (has_base && v == k.baseline) continue;
        const std::string s = v.toStdString();
        const QString& key = k.key;
        if (key == "model") o.model = s;
        else if (key == "gpu") o.gpu = s;
        else if (key == "nodes") o.nodes = v.toLongLong();
        else if (key == "gpus-per-node") o.gpus_per_node = v.toLongLong();
        else if (key == "micro-batch") o.micro_batch = v.toLongLong();
        else if (key == "seq-len") o.seq_len = v.toLongLong();
        else if (key == "grad-accum") o.grad_accum = v.toLongLong();
        else if (key == "no-sync") o.no_sync = v == "true";
        else if (key == "param-dtype") o.param_dtype = s;
        else if (key == "reduce-dtype") o.reduce_dtype = s;
        else if (key == "master-dtype") o.master_dtype = s;
        else if (key == "optimizer") o.optimizer = s;
        else if (key == "ac") o.ac = s;
        else if (key == "attention") o.attention = s;
        else if (key == "kernels") o.kernels = s;
        else if (key == "impl") o.impl = s;
        else if (key == "offload") o.offload = s;
        else if (key == "frozen") o.frozen = s;
        else if (key == "lora") o.lora = s.empty() ? std::string("0") : s;
        else if (key == "all-gather-dtype") o.all_gather_dtype = s;
        else if (key == "clip-grad-norm") {
            bool ok = false;
            const double max_norm = v.trimmed().toDouble(&ok);
            o.clip_grad_norm = ok ? max_norm : std::numeric_limits<double>::quiet_NaN();  // buildPlan names it
        }
        else if (key == "checkpoint") o.checkpoint = s;
        else if (key == "checkpoint-every") o.checkpoint_every = v.toLongLong();
        else if (key == "checkpoint-offload-to-cpu") o.checkpoint_offload_to_cpu = s;
        else if (key == "strategy") o.strategy = s;
        else if (key == "shard-size") o.shard_size = v.toLongLong();
        else if (key == "tp") o.tp = v.toLongLong();
        else if (key == "sequence-parallel") o.sequence_parallel = s;
        else if (key == "loss-parallel") o.loss_parallel = s;
        else if (key == "async-tp") o.async_tp = s;
        else if (key == "pp") o.pp = v.toLongLong();
        else if (key == "pp-schedule") o.pp_schedule = s;
        else if (key == "pp-virtual-stages") o.pp_virtual_stages = v.toLongLong();
        else if (key == "fsdp") o.fsdp = v.toLongLong();
        else if (key == "wrap") o.wrap = s;
        else if (key == "reshard-after-forward" && v != "default") o.reshard_after_forward = s;
        else if (key == "prefetch-depth") o.prefetch_depth = v.toLongLong();
        else if (key == "forward-prefetch") o.forward_prefetch = s;
        else if (key == "backward-prefetch") o.backward_prefetch = s;
    }
    return o;
}

QString InputPanel::profileArg() const { return knobText("profile"); }

void InputPanel::setStoredProfiles(const QStringList& names) {
    auto* box = static_cast<QComboBox*>(find("profile")->editor);
    const QString current = profileArg();
    ++m_updating;
    box->clear();
    box->addItem(kDocumentedFigures);
    box->addItems(names);
    find("profile")->set(current);
    --m_updating;
}

bool InputPanel::setKnob(const QString& key, const QString& value) {
    Knob* k = find(key);
    if (!k) return false;
    k->set(value);
    return true;
}

QString InputPanel::knobText(const QString& key) const {
    const Knob* k = find(key);
    return k ? k->text() : QString();
}

QWidget* InputPanel::knobEditor(const QString& key) const {
    const Knob* k = find(key);
    return k ? k->editor : nullptr;
}

void InputPanel::openModelFile(const QString& path) { setKnob("model", QFileInfo(path).absoluteFilePath()); }

void InputPanel::applyCandidate(const sim::SweepCandidate& c) {
    ++m_updating;
    setKnob("strategy", toQString(core::strategyName(c.strategy)));
    setKnob("wrap", toQString(core::wrapPolicyString(c.wrap)));
    setKnob("micro-batch", QString::number(c.micro_batch));
    setKnob("ac", toQString(core::acString(c.ac)));
    --m_updating;
    emitChanged();
}

void InputPanel::showError(const QString& message) {
    clearErrors();
    QLabel* target = m_general_error;
    qsizetype best = -1;
    for (const Knob& k : m_knobs) {
        for (const QString& needle : {"--" + k.key, k.field}) {
            if (needle.isEmpty()) continue;
            const qsizetype at = wholeIndex(message, needle);
            if (at >= 0 && (best < 0 || at < best)) {
                best = at;
                target = k.error;
            }
        }
    }
    target->setText(message);
    target->show();
}

void InputPanel::clearErrors() {
    m_general_error->clear();
    m_general_error->hide();
    for (Knob& k : m_knobs) {
        k.error->clear();
        k.error->hide();
    }
}

QString InputPanel::errorText(const QString& key) const {
    if (key.isEmpty()) return m_general_error->text();
    const Knob* k = find(key);
    return k ? k->error->text() : QString();
}

}  // namespace shardcast::gui
