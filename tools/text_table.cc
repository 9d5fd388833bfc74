#include "tools/text_table.h"

#include <algorithm>

namespace torchfarm {

namespace {

constexpr char kEscape = '\x1b';
constexpr const char* kReset = "\x1b[0m";

const char* SgrCode(Colour colour) {
  switch (colour) {
    case Colour::kBold:
      return "\x1b[1m";
    case Colour::kGreen:
      return "\x1b[32m";
    case Colour::kCyan:
      return "\x1b[36m";
    case Colour::kYellow:
      return "\x1b[33m";
    case Colour::kRed:
      return "\x1b[31m";
    case Colour::kGrey:
      return "\x1b[90m";
    case Colour::kNone:
      break;
  }
  return "";
}

// Length of the CSI sequence starting at line[i] (ESC [ parameters final-byte), or 0.
size_t EscapeLength(const std::string& line, size_t i) {
  if (line[i] != kEscape || i + 1 >= line.size() || line[i + 1] != '[') return 0;
  size_t j = i + 2;
  while (j < line.size() && !(line[j] >= 0x40 && line[j] <= 0x7e)) ++j;
  return std::min(j + 1, line.size()) - i;
}

std::string Pad(const std::string& text, size_t width, TextTable::Align align) {
  if (text.size() >= width) return text;
  std::string spaces(width - text.size(), ' ');
  return align == TextTable::Align::kLeft ? text + spaces : spaces + text;
}

}  // namespace

std::string Paint(const std::string& text, Colour colour, bool enabled) {
  if (!enabled || colour == Colour::kNone) return text;
  return SgrCode(colour) + text + kReset;
}

size_t VisibleWidth(const std::string& line) {
  size_t width = 0;
  for (size_t i = 0; i < line.size();) {
    size_t escape = EscapeLength(line, i);
    if (escape > 0) {
      i += escape;
    } else {
      ++width;
      ++i;
    }
  }
  return width;
}

std::string TruncateVisible(const std::string& line, size_t width) {
  if (VisibleWidth(line) <= width) return line;
  std::string out;
  size_t visible = 0;
  bool coloured = false;
  for (size_t i = 0; i < line.size();) {
    size_t escape = EscapeLength(line, i);
    if (escape > 0) {
      std::string sequence = line.substr(i, escape);
      coloured = sequence != kReset;
      out += sequence;
      i += escape;
      continue;
    }
    if (visible == width) break;
    out += line[i++];
    ++visible;
  }
  if (coloured) out += kReset;
  return out;
}

TextTable::TextTable(std::vector<Column> columns, int gap)
    : columns_(std::move(columns)), gap_(gap) {}

void TextTable::AddRow(std::vector<Cell> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::vector<std::string> TextTable::Render(bool colour) const {
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    widths[c] = columns_[c].header.size();
    for (const auto& row : rows_) widths[c] = std::max(widths[c], row[c].text.size());
  }
  const std::string gap(gap_, ' ');
  auto render_line = [&](auto cell_at) {
    std::string line;
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (c > 0) line += gap;
      const Cell& cell = cell_at(c);
      // Pad before painting so the escapes do not count towards the width.
      std::string padded = Pad(cell.text, widths[c], columns_[c].align);
      size_t text_start = columns_[c].align == Align::kLeft ? 0 : padded.size() - cell.text.size();
      line += padded.substr(0, text_start) + Paint(cell.text, cell.colour, colour) +
              padded.substr(text_start + cell.text.size());
    }
    line.erase(line.find_last_not_of(' ') + 1);
    return line;
  };
  std::vector<std::string> lines;
  std::vector<Cell> headers;
  for (const auto& column : columns_) headers.push_back({column.header, Colour::kBold});
  lines.push_back(render_line([&](size_t c) -> const Cell& { return headers[c]; }));
  for (const auto& row : rows_) {
    lines.push_back(render_line([&](size_t c) -> const Cell& { return row[c]; }));
  }
  return lines;
}

}  // namespace torchfarm
