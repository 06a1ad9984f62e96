#include "gui/views/history_view.hpp"

#include <QComboBox>
#include <QDateTime>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include "gui/widgets/palette.hpp"

namespace shardcast::gui {

namespace {
constexpr int kMaxDetailChars = 20'000;
}  // namespace

HistoryModel::HistoryModel(QObject* parent) : QAbstractTableModel(parent) {}

void HistoryModel::setEntries(std::vector<db::Entry> entries) {
    beginResetModel();
    m_entries = std::move(entries);
    endResetModel();
}

int HistoryModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(m_entries.size());
}

int HistoryModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant HistoryModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() < 0 || index.row() >= rowCount()) return {};
    const db::Entry& e = m_entries[static_cast<size_t>(index.row())];
    if (role == kSortRole) {
        switch (static_cast<Column>(index.column())) {
            case Created: return QVariant::fromValue<qlonglong>(e.created_unix_ms);
            case Id: return QString("%1-%2").arg(static_cast<int>(e.id.kind)).arg(e.id.number, 12, 10, QChar('0'));
            default: break;
        }
    }
    if (role != Qt::DisplayRole && role != kSortRole && role != Qt::ToolTipRole) return {};
    switch (static_cast<Column>(index.column())) {
        case Id: return QString::fromStdString(db::formatId(e.id));
        case Kind: return toQString(db::kindPluralName(e.id.kind));
        case Name: return QString::fromStdString(e.name);
        case Created:
            return QDateTime::fromMSecsSinceEpoch(e.created_unix_ms, Qt::UTC).toString("yyyy-MM-dd HH:mm:ss 'UTC'");
        case Summary: return QString::fromStdString(e.summary);
        case Tags: {
            QStringList tags;
            for (const std::string& t : e.tags) tags << QString::fromStdString(t);
            return tags.join(", ");
        }
        case ColumnCount: break;
    }
    return {};
}

QVariant HistoryModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (role != Qt::DisplayRole || orientation != Qt::Horizontal) return QAbstractTableModel::headerData(section, orientation, role);
    switch (static_cast<Column>(section)) {
        case Id: return "id";
        case Kind: return "kind";
        case Name: return "name";
        case Created: return "created";
        case Summary: return "summary";
        case Tags: return "tags";
        case ColumnCount: break;
    }
    return {};
}

HistoryView::HistoryView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    auto* row = new QHBoxLayout;
    m_search = new QLineEdit;
    m_search->setPlaceholderText("Search ids, names, summaries and tags");
    m_search->setClearButtonEnabled(true);
    m_kind = new QComboBox;
    m_kind->addItem("all kinds");
    for (db::Kind k : {db::Kind::plan, db::Kind::prediction, db::Kind::run, db::Kind::profile, db::Kind::comparison}) {
        m_kind->addItem(toQString(db::kindPluralName(k)));
    }
    auto* refresh_button = new QPushButton("Refresh");
    auto* open = new QPushButton("Open");
    open->setToolTip("Load a plan or prediction into the knobs, a run or comparison into the compare view.");
    row->addWidget(m_search, 1);
    row->addWidget(m_kind);
    row->addWidget(refresh_button);
    row->addWidget(open);
    layout->addLayout(row);
    m_status = new QLabel;
    m_status->setWordWrap(true);
    layout->addWidget(m_status);

    m_model = new HistoryModel(this);
    m_proxy = new QSortFilterProxyModel(this);
    m_proxy->setSourceModel(m_model);
    m_proxy->setFilterKeyColumn(-1);
    m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
    m_proxy->setSortRole(HistoryModel::kSortRole);
    m_table = sortableTable(m_proxy, HistoryModel::Created, Qt::DescendingOrder);
    m_table->horizontalHeader()->setSectionResizeMode(HistoryModel::Summary, QHeaderView::Stretch);
    m_detail = new QPlainTextEdit;
    m_detail->setReadOnly(true);
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(m_table);
    split->addWidget(m_detail);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    layout->addWidget(split, 1);

    connect(m_search, &QLineEdit::textChanged, this, &HistoryView::setSearch);
    connect(m_kind, &QComboBox::currentIndexChanged, this, [this] { (void)refresh(); });
    connect(refresh_button, &QPushButton::clicked, this, [this] { (void)refresh(); });
    connect(open, &QPushButton::clicked, this, [this] {
        const QModelIndex current = m_table->currentIndex();
        if (current.isValid()) (void)openRow(current.row());
    });
    connect(m_table, &QTableView::doubleClicked, this, [this](const QModelIndex& i) { (void)openRow(i.row()); });
    connect(m_table->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& i) {
        if (!i.isValid()) return;
        const db::Entry& e = m_model->entry(m_proxy->mapToSource(i).row());
        auto object = get(e.id);
        QString text = object ? QString::fromStdString(object->body.dump(2)) : QString::fromStdString(object.error().message);
        if (text.size() > kMaxDetailChars) text = text.left(kMaxDetailChars) + "\n...";
        m_detail->setPlainText(text);
    });

    if (auto path = db::defaultDbPath()) m_path = *path;
}

void HistoryView::setStorePath(const std::filesystem::path& path) { m_path = path; }

void HistoryView::setSearch(const QString& text) {
    if (m_search->text() != text) m_search->setText(text);
    m_proxy->setFilterFixedString(text);
}

core::Status HistoryView::refresh() {
    if (m_path.empty()) {
        m_status->setText("No store: set SHARDCAST_DB or HOME.");
        return core::makeError("no store path");
    }
    if (!std::filesystem::exists(m_path)) {
        m_model->setEntries({});
        m_status->setText(QString("No store at %1 yet: `shardcast plan --save` or File > Save to store creates it.")
                              .arg(QString::fromStdString(m_path.string())));
        return core::Ok{};
    }
    auto store = db::Store::open(m_path, false);
    if (!store) {
        m_status->setText(QString::fromStdString(store.error().message));
        return store.error();
    }
    std::optional<db::Kind> kind;
    if (m_kind->currentIndex() > 0) {
        auto k = db::parseKindPlural(m_kind->currentText().toStdString());
        if (k) kind = *k;
    }
    auto entries = (*store)->list(kind, std::nullopt);
    if (!entries) {
        m_status->setText(QString::fromStdString(entries.error().message));
        return entries.error();
    }
    m_status->setText(QString("%1 objects in %2").arg(entries->size()).arg(QString::fromStdString(m_path.string())));
    m_model->setEntries(std::move(entries).value());
    if (m_proxy->rowCount() > 0) m_table->setCurrentIndex(m_proxy->index(0, 0));  // its document below
    return core::Ok{};
}

core::Result<db::Object> HistoryView::get(const db::ObjectId& id) const {
    auto store = db::Store::open(m_path, false);
    if (!store) return store.error();
    return (*store)->get(id);
}

core::Status HistoryView::openRow(int proxy_row) {
    if (proxy_row < 0 || proxy_row >= m_proxy->rowCount()) return core::makeError("no such row");
    const db::Entry& e = m_model->entry(m_proxy->mapToSource(m_proxy->index(proxy_row, 0)).row());
    auto object = get(e.id);
    if (!object) return object.error();
    try {
        return openObject(*object);
    } catch (const nlohmann::json::exception& ex) {
        return core::makeError(db::formatId(e.id) + ": " + ex.what());
    }
}

core::Status HistoryView::openObject(const db::Object& object) {
    const QString id = QString::fromStdString(db::formatId(object.id));
    // A prediction opens its plan, a comparison its run: links stored as ids ("plan": "plan-3").
    auto openLinked = [this](const nlohmann::json& ref) -> core::Status {
        auto linked_id = db::parseId(ref.get<std::string>());
        if (!linked_id) return linked_id.error();
        auto linked = get(*linked_id);
        if (!linked) return linked.error();
        return openObject(*linked);
    };
    switch (object.id.kind) {
        case db::Kind::plan: emit openPlanRequested(id, object.body.at("plan")); return core::Ok{};
        case db::Kind::run: emit openRunRequested(id, object.body.at("record")); return core::Ok{};
        case db::Kind::prediction: return openLinked(object.body.at("plan"));
        case db::Kind::comparison: return openLinked(object.body.at("run"));
        case db::Kind::profile: break;
    }
    return core::makeError(id.toStdString() + ": a profile has nothing to open; its figures are shown below");
}

}  // namespace shardcast::gui
