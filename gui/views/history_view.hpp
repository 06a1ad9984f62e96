#pragma once
// The History view over the store (db/store.hpp): plans, predictions, runs, profiles and
// comparisons, newest first, searchable; opening one loads it (a plan or a prediction's plan into
// the knobs, a run or a comparison's run into the compare view). Built only with the store.
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include <QAbstractTableModel>
#include <QWidget>
#include <nlohmann/json.hpp>

#include "core/base/result.hpp"
#include "db/store.hpp"

class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QSortFilterProxyModel;
class QTableView;

namespace shardcast::gui {

class HistoryModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Id, Kind, Name, Created, Summary, Tags, ColumnCount };
    static constexpr int kSortRole = Qt::UserRole;  // created time as a number, ids by kind and number

    explicit HistoryModel(QObject* parent = nullptr);
    void setEntries(std::vector<db::Entry> entries);
    const db::Entry& entry(int row) const { return m_entries[static_cast<size_t>(row)]; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

private:
    std::vector<db::Entry> m_entries;
};

class HistoryView : public QWidget {
    Q_OBJECT
public:
    explicit HistoryView(QWidget* parent = nullptr);
    // The store file (db::defaultDbPath() unless set); refresh() re-reads it.
    void setStorePath(const std::filesystem::path& path);
    const std::filesystem::path& storePath() const { return m_path; }
    core::Status refresh();
    // Opens the object of a row of the (filtered, sorted) table.
    core::Status openRow(int proxy_row);
    HistoryModel* model() const { return m_model; }
    QSortFilterProxyModel* proxy() const { return m_proxy; }
    void setSearch(const QString& text);

signals:
    // A self-contained plan (selfContainedPlanJson) to load into the knobs; `id` names it.
    void openPlanRequested(const QString& id, const nlohmann::json& plan);
    // A run record (runRecordToJson) to show in the compare view.
    void openRunRequested(const QString& id, const nlohmann::json& record);

private:
    core::Result<db::Object> get(const db::ObjectId& id) const;
    core::Status openObject(const db::Object& object);  // may throw nlohmann::json::exception

    std::filesystem::path m_path;
    HistoryModel* m_model = nullptr;
    QSortFilterProxyModel* m_proxy = nullptr;
    QTableView* m_table = nullptr;
    QLineEdit* m_search = nullptr;
    QComboBox* m_kind = nullptr;
    QLabel* m_status = nullptr;
    QPlainTextEdit* m_detail = nullptr;
};

}  // namespace shardcast::gui
