-- The normal forms stored principals were rewritten to (`header` and `local` mode: NFKC, case
-- folding, trimmed; see domain::PrincipalForm). A form listed here was applied to every stored
-- row; a start (or `gatehouse migrate`) that finds its form missing rewrites the rows, in Rust,
-- since SQL has no NFKC (store::principals). Rows whose principals collide stay as they are.
CREATE TABLE principal_forms (
    form TEXT PRIMARY KEY
);
