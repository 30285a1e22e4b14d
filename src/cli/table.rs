//! Tables for the operator's terminal (`audit`, `admin`): aligned columns under a heading row,
//! the last column unpadded, and every cell shown with control, bidi and invisible characters as
//! their code points (`crate::text::printable`), so a client name, principal or tool name from
//! the database cannot move the cursor, fake a row or reorder one.

/// `rows` under `headings`, aligned, one line each.
pub(super) fn table(headings: &[&str], rows: &[Vec<String>]) -> String {
    let headings: Vec<String> = headings.iter().map(|h| (*h).to_owned()).collect();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| crate::text::printable(cell)).collect())
        .collect();
    let mut widths: Vec<usize> = headings.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for cells in std::iter::once(&headings).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in cells.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < cells.len() {
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
