/*
 * Offline oracle of upstream WebShop's search: pyserini 0.17.0 = Anserini 0.14.3 = Lucene 8.11.0.
 *
 * Runs against the Anserini fatjar that ships inside the pyserini 0.17.0 wheel
 * (pyserini/resources/jars/anserini-0.14.3-fatjar.jar) and calls Anserini's own classes, so nothing of the
 * analysis, indexing or ranking is re-implemented here:
 *
 *   analyze          stdin: one text per line; stdout: per line, the tokens of
 *                    io.anserini.analysis.DefaultEnglishAnalyzer.newDefaultInstance() (the analyzer that
 *                    IndexCollection uses with default flags and that SimpleSearcher(indexDir) queries with),
 *                    obtained through io.anserini.analysis.AnalyzerUtils.analyze, tab-separated.
 *   tokenize         as analyze, with DefaultEnglishAnalyzer.newNonStemmingInstance() (same chain without
 *                    the Porter stemmer), to tell tokenizer differences from stemmer differences.
 *   index IN OUT     io.anserini.index.IndexCollection.main with upstream WebShop's flags
 *                    (search_engine/run_indexing.sh): -collection JsonCollection -input IN -index OUT
 *                    -generator DefaultLuceneDocumentGenerator -threads 1 -storePositions -storeDocvectors
 *                    -storeRaw. IN is a folder of JSONL files of {"id", "contents"}.
 *   search INDEX [K] stdin: one query per line; stdout: one JSON object per line,
 *                    {"hits": [[docid, score, raw_score], ...]} or {"error": "..."}. `score` is what
 *                    io.anserini.search.SimpleSearcher.search(q, K) returns (pyserini's LuceneSearcher.search
 *                    calls exactly that, K defaults to 50 = WebShop's SEARCH_RETURN_N); `raw_score` is Lucene's
 *                    unrounded float score of the same hit (same query, same sort), for diagnosing near-ties.
 *   version          the Lucene version inside the jar.
 *
 * Build and run (see benchmarks/parity/webshop_lucene_compare.py):
 *   javac -cp anserini-fatjar.jar -d /tmp/lucene LuceneOracle.java
 *   java -cp /tmp/lucene:/tmp/lucene/anserini-fatjar.jar LuceneOracle analyze < lines.txt
 */

import io.anserini.analysis.AnalyzerUtils;
import io.anserini.analysis.DefaultEnglishAnalyzer;
import io.anserini.index.IndexArgs;
import io.anserini.index.IndexCollection;
import io.anserini.search.SimpleSearcher;
import io.anserini.search.query.BagOfWordsQueryGenerator;
import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.search.similarities.BM25Similarity;
import org.apache.lucene.store.FSDirectory;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.util.List;

public class LuceneOracle {

  private static String json(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"': b.append("\\\""); break;
        case '\\': b.append("\\\\"); break;
        case '\n': b.append("\\n"); break;
        case '\r': b.append("\\r"); break;
        case '\t': b.append("\\t"); break;
        default:
          if (c < 0x20) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
      }
    }
    return b.append('"').toString();
  }

  public static void main(String[] args) throws Exception {
    if (args.length == 0) {
      System.err.println("usage: LuceneOracle analyze | tokenize | index IN_DIR INDEX_DIR | search INDEX_DIR [K] | version");
      System.exit(2);
    }
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), false);
    String line;
    switch (args[0]) {
      case "version":
        out.println(org.apache.lucene.util.Version.LATEST);
        break;
      case "analyze":
      case "tokenize": {
        Analyzer analyzer = args[0].equals("analyze")
            ? DefaultEnglishAnalyzer.newDefaultInstance() : DefaultEnglishAnalyzer.newNonStemmingInstance();
        while ((line = in.readLine()) != null) {
          out.println(String.join("\t", AnalyzerUtils.analyze(analyzer, line)));
        }
        break;
      }
      case "index":
        IndexCollection.main(new String[] {
            "-collection", "JsonCollection", "-input", args[1], "-index", args[2],
            "-generator", "DefaultLuceneDocumentGenerator", "-threads", "1",
            "-storePositions", "-storeDocvectors", "-storeRaw"});
        break;
      case "search": {
        int k = args.length > 2 ? Integer.parseInt(args[2]) : 50;
        SimpleSearcher searcher = new SimpleSearcher(args[1]);  // BM25(0.9, 0.4), DefaultEnglishAnalyzer
        // a second, plain Lucene searcher with the same query and sort, only to expose the unrounded scores
        IndexSearcher raw = new IndexSearcher(DirectoryReader.open(FSDirectory.open(Paths.get(args[1]))));
        raw.setSimilarity(new BM25Similarity(0.9f, 0.4f));
        Analyzer analyzer = DefaultEnglishAnalyzer.newDefaultInstance();
        while ((line = in.readLine()) != null) {
          StringBuilder b = new StringBuilder();
          try {
            SimpleSearcher.Result[] hits = searcher.search(line, k);
            Query query = new BagOfWordsQueryGenerator().buildQuery(IndexArgs.CONTENTS, analyzer, line);
            TopDocs rs = raw.search(query, k, SimpleSearcher.BREAK_SCORE_TIES_BY_DOCID, true);
            b.append("{\"hits\": [");
            for (int i = 0; i < hits.length; i++) {
              ScoreDoc sd = rs.scoreDocs[i];
              if (sd.doc != hits[i].lucene_docid) {
                throw new IllegalStateException("raw search disagrees with SimpleSearcher at rank " + (i + 1));
              }
              if (i > 0) b.append(", ");
              b.append('[').append(json(hits[i].docid)).append(", ").append(hits[i].score).append(", ")
                  .append(sd.score).append(']');
            }
            b.append("]}");
          } catch (Exception e) {
            b.setLength(0);
            b.append("{\"error\": ").append(json(e.toString())).append('}');
          }
          out.println(b);
        }
        break;
      }
      default:
        System.err.println("unknown mode " + args[0]);
        System.exit(2);
    }
    out.flush();
  }
}
