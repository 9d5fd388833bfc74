// Aligned plain-text columns with optional ANSI colour, and escape-aware truncation.
//
// Owns: nothing beyond its cells; pure. Used by `torchfarm stats` (plain) and `torchfarm top`
// (coloured, truncated to the terminal's width). Widths count bytes outside escape sequences,
// which equals columns for the ASCII the admin replies carry (names, states, numbers).
#pragma once

#include <string>
#include <vector>

namespace torchfarm {

enum class Colour { kNone, kBold, kGreen, kCyan, kYellow, kRed, kGrey };

// `text` wrapped in the SGR codes of `colour` (and a reset) when `enabled`; else `text`.
std::string Paint(const std::string& text, Colour colour, bool enabled);
// Columns `line` takes on a terminal: its length without CSI escape sequences (ESC [ … letter).
size_t VisibleWidth(const std::string& line);
// The first `width` visible columns of `line`, keeping escape sequences whole and appending a
// reset when colour was cut off mid-way. Lines that fit are returned unchanged.
std::string TruncateVisible(const std::string& line, size_t width);

struct Cell {
  std::string text;
  Colour colour = Colour::kNone;
};

class TextTable {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = Align::kLeft;
  };

  // `gap`: spaces between columns.
  explicit TextTable(std::vector<Column> columns, int gap = 2);

  // Missing trailing cells print as empty; extra cells are ignored.
  void AddRow(std::vector<Cell> cells);
  size_t row_count() const { return rows_.size(); }

  // The header line, then one line per row; each column as wide as its widest cell. Headers are
  // bold when `colour`. Trailing spaces are trimmed.
  std::vector<std::string> Render(bool colour) const;

 private:
  std::vector<Column> columns_;
  int gap_;
  std::vector<std::vector<Cell>> rows_;
};

}  // namespace torchfarm
