"""The baselines the sentiment classifier is measured against, each fitted on the same
training texts: the majority class, a unigram bag-of-words logistic regression and the
word uni+bigram tf-idf logistic regression of IMDB papers (scikit-learn, imported inside
the functions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rnnkit.recipe import Metrics

if TYPE_CHECKING:
    import numpy as np
    from rnnkit_recipes.sentiment.config import SentimentConfig
    from rnnkit_recipes.sentiment.data import SentimentData

    from rnnkit.data.text import TextSplit


def _majority_probabilities(
    train: TextSplit, test: TextSplit, num_classes: int
) -> np.ndarray:
    """Every test text gets the training class frequencies: the majority class wins."""
    import numpy as np

    frequencies = np.bincount(train.labels, minlength=num_classes) / len(train)
    return np.tile(frequencies, (len(test), 1))


def _one_blas_thread():
    """The baselines fitted on one BLAS thread: their L-BFGS vector updates are
    too small to share out, and a BLAS thread per core made the logistic
    regressions many times slower, the same coefficients to round-off
    (docs/performance.md, "Sentiment baselines")."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def baseline_table(data: SentimentData, config: SentimentConfig) -> Metrics:
    """The baselines' test figures, each fitted on the same training texts: the
    majority class, unigram bag-of-words and uni+bigram tf-idf logistic regressions."""
    from rnnkit.metrics import classification_metrics

    text = data.text
    train, test, num_classes = text.train, text.test, text.num_classes
    with _one_blas_thread():
        return {
            "majority": classification_metrics(
                test.labels, _majority_probabilities(train, test, num_classes)
            ),
            "bag_of_words": classification_metrics(
                test.labels,
                _bag_of_words_probabilities(train, test, num_classes, config),
            ),
            "tfidf_bigrams": classification_metrics(
                test.labels,
                _tfidf_bigram_probabilities(
                    train, text.validation, test, num_classes, config
                ),
            ),
        }


def _bag_of_words_probabilities(
    train: TextSplit, test: TextSplit, num_classes: int, config: SentimentConfig
) -> np.ndarray:
    """A unigram bag-of-words logistic regression (scikit-learn) on the same training
    texts, with the same vocabulary size and lower-casing as the model."""
    import numpy as np
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = CountVectorizer(
        binary=True,
        lowercase=config.data.lowercase,
        max_features=config.data.vocabulary_size,
    )
    features = vectorizer.fit_transform(train.texts)
    classifier = LogisticRegression(max_iter=1000)
    classifier.fit(features, train.labels)
    probabilities = classifier.predict_proba(vectorizer.transform(test.texts))
    # Columns follow classifier.classes_ (the classes seen in training).
    by_class = np.zeros((len(test), num_classes))
    by_class[:, classifier.classes_] = probabilities
    return by_class


# The inverse regularisation strengths the tf-idf baseline chooses from.
TFIDF_C_GRID = (1.0, 4.0, 16.0, 64.0)


def _tfidf_bigram_probabilities(
    train: TextSplit,
    validation: TextSplit,
    test: TextSplit,
    num_classes: int,
    config: SentimentConfig,
) -> np.ndarray:
    """The standard strong linear baseline of IMDB papers: word unigram + bigram tf-idf
    (sublinear term frequency, n-grams seen in at least two training texts) and a
    logistic regression whose C is chosen on the validation split (never the test)."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer(
        ngram_range=(1, 2),
        min_df=2,
        sublinear_tf=True,
        lowercase=config.data.lowercase,
    )
    features = vectorizer.fit_transform(train.texts)
    best, best_accuracy = None, -1.0
    validation_features = vectorizer.transform(validation.texts)
    for strength in TFIDF_C_GRID:
        classifier = LogisticRegression(C=strength, max_iter=1000)
        classifier.fit(features, train.labels)
        accuracy = classifier.score(validation_features, validation.labels)
        if accuracy > best_accuracy:
            best, best_accuracy = classifier, accuracy
    probabilities = best.predict_proba(vectorizer.transform(test.texts))
    by_class = np.zeros((len(test), num_classes))
    by_class[:, best.classes_] = probabilities
    return by_class
