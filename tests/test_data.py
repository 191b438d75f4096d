import gzip

import pytest

from subspaces.data.nli import read_triplets
from subspaces.data.sts import (
    STS_YEARS,
    load_sick,
    load_sts_year,
    load_stsb,
    read_sick_file,
    read_sts_subset,
    read_stsb_file,
)
from subspaces.data.text import read_corpus, wordnet_sentences
from subspaces.errors import DataError


def test_stsb_reads_quotes_literally(tmp_path):
    path = tmp_path / "sts-test.csv"
    path.write_text(
        'g\tf\t2012\t1\t4.5\tHe said "hi.\tShe said "hello".\tsrc1\tsrc2\ng\tf\t2012\t2\t0.0\ta\tb\n', encoding="utf-8"
    )
    pairs = read_stsb_file(path)
    assert pairs.sentences1 == ['He said "hi.', "a"]
    assert pairs.sentences2 == ['She said "hello".', "b"]
    assert pairs.scores == [4.5, 0.0]


def test_stsb_malformed_row_names_file_and_line(tmp_path):
    path = tmp_path / "sts-dev.csv"
    path.write_text("g\tf\t2012\t1\t4.5\ta\tb\ng\tf\t2012\t2\tnot-a-score\ta\tb\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"sts-dev.csv, line 2: score 'not-a-score'"):
        read_stsb_file(path)
    path.write_text("g\tf\t2012\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 1: expected at least 7"):
        read_stsb_file(path)


def test_sts_subset_skips_unscored_lines(tmp_path):
    (tmp_path / "in.txt").write_text("a\tb\nc\td\ne\tf\n", encoding="utf-8")
    (tmp_path / "gs.txt").write_text("1.0\n\n3.5\n", encoding="utf-8")
    s1, s2, gold, skipped = read_sts_subset(tmp_path / "in.txt", tmp_path / "gs.txt")
    assert (s1, s2, gold, skipped) == (["a", "e"], ["b", "f"], [1.0, 3.5], 1)


def test_sts_subset_length_mismatch(tmp_path):
    (tmp_path / "in.txt").write_text("a\tb\nc\td\n", encoding="utf-8")
    (tmp_path / "gs.txt").write_text("1.0\n", encoding="utf-8")
    with pytest.raises(DataError, match="2 input lines but 1 gold lines"):
        read_sts_subset(tmp_path / "in.txt", tmp_path / "gs.txt")


def test_sts_year_concatenates_subsets(tiny_data):
    pairs = load_sts_year("STS13")
    assert list(pairs.subsets) == STS_YEARS["STS13"]
    assert len(pairs) == 11 * len(STS_YEARS["STS13"]) and pairs.skipped == len(STS_YEARS["STS13"])


def test_sick_and_stsb_loaders(tiny_data):
    assert len(load_sick("test")) == 40 and load_sick().name == "SICKRelatedness"
    assert len(load_stsb("dev", "senteval")) == 40


def test_sick_bad_header(tmp_path):
    path = tmp_path / "SICK.txt"
    path.write_text("id\ta\tb\n1\tx\ty\n", encoding="utf-8")
    with pytest.raises(DataError, match="lacks sentence_A"):
        read_sick_file(path)


def test_missing_dataset_names_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBSPACES_DATA", str(tmp_path))
    with pytest.raises(DataError, match="dataset 'stsb' not found"):
        load_stsb()


def test_triplets_good_and_broken(tmp_path):
    good = tmp_path / "nli.csv"
    good.write_text('sent0,sent1,hard_neg\n"A man, tall.",A man.,A woman.\n', encoding="utf-8")
    assert read_triplets(good)[0].anchor == "A man, tall."
    bad = tmp_path / "bad.csv"
    bad.write_text("sent0,sent1,hard_neg\na,b,c\nd,e\n", encoding="utf-8")
    with pytest.raises(DataError, match="bad.csv, line 3: expected 3 fields"):
        read_triplets(bad)
    (tmp_path / "empty.csv").write_text("", encoding="utf-8")
    with pytest.raises(DataError, match="empty"):
        read_triplets(tmp_path / "empty.csv")
    (tmp_path / "hdr.csv").write_text("premise,hypothesis\na,b\n", encoding="utf-8")
    with pytest.raises(DataError, match="sent0 and sent1"):
        read_triplets(tmp_path / "hdr.csv")


def test_triplets_from_gzip_and_undecodable_files(tmp_path):
    from subspaces.data.nli import is_csv, training_rows

    with gzip.open(tmp_path / "nli.csv.gz", "wt", encoding="utf-8", newline="") as fh:
        fh.write('sent0,sent1,hard_neg\n"A man,\ntall.",A man.,A woman.\nx,y,z\n')
    assert is_csv(tmp_path / "nli.csv.gz") and not is_csv(tmp_path / "nli.txt.gz")
    assert training_rows(tmp_path / "nli.csv.gz") == [("A man,\ntall.", "A man.", "A woman."), ("x", "y", "z")]
    assert training_rows(tmp_path / "nli.csv.gz", limit=1) == [("A man,\ntall.", "A man.", "A woman.")]
    (tmp_path / "latin1.csv").write_bytes("sent0,sent1\ncaf\xe9,b\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        read_triplets(tmp_path / "latin1.csv")
    (tmp_path / "cut.csv.gz").write_bytes(gzip.compress(b"sent0,sent1\na,b\n" * 50)[:40])
    with pytest.raises(DataError, match="cannot read as CSV"):
        read_triplets(tmp_path / "cut.csv.gz")


def test_corpus_txt_gz_and_errors(tmp_path):
    with gzip.open(tmp_path / "c.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write("one\n\n two \none\n")
    assert read_corpus(tmp_path / "c.txt.gz") == ["one", "two", "one"]
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="holds no text"):
        read_corpus(tmp_path / "empty.txt")
    with pytest.raises(DataError, match="file not found"):
        read_corpus(tmp_path / "nope.txt")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        read_corpus(tmp_path / "latin1.txt")


def test_wordnet_sentences_are_distinct(tiny_data):
    sents = wordnet_sentences()
    assert len(sents) == len(set(sents)) > 0
