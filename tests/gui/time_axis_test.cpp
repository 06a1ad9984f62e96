// The time <-> pixel mapping of the timeline and memory views (gui/widgets/time_axis.hpp).
#include <QtTest>

#include "gui/widgets/time_axis.hpp"

using shardcast::gui::TimeAxis;

class TimeAxisTest : public QObject {
    Q_OBJECT
private slots:
    // A 1 ms span over 1000 px starting at x = 100: 1000 ns per pixel.
    void resetFitsTheSpan() {
        TimeAxis a;
        a.setSpan(1'000'000);
        a.setViewport(100, 1000);
        QCOMPARE(a.nsPerPixel(), 1000.0);
        QCOMPARE(a.toPixel(0), 100.0);
        QCOMPARE(a.toPixel(1'000'000), 1100.0);
        QCOMPARE(a.toPixel(500'000), 600.0);
        QCOMPARE(a.toTime(600.0), int64_t{500'000});
        QVERIFY(a.isReset());
    }

    // Zooming in by 2 at x = 600 halves ns/px and keeps t = 500 us at x = 600; t = 0 moves to
    // 600 - 500000 / 500 = -400.
    void zoomKeepsThePointUnderTheCursor() {
        TimeAxis a;
        a.setSpan(1'000'000);
        a.setViewport(100, 1000);
        a.zoomAround(600, 2.0);
        QCOMPARE(a.nsPerPixel(), 500.0);
        QCOMPARE(a.toPixel(500'000), 600.0);
        QCOMPARE(a.toPixel(0), -400.0);
        // Off-centre: the time under x = 250 stays there through a 4x zoom.
        const int64_t under = a.toTime(250);
        a.zoomAround(250, 4.0);
        QCOMPARE(a.nsPerPixel(), 125.0);
        QCOMPARE(a.toTime(250), under);
        QVERIFY(!a.isReset());
    }

    void zoomOutStopsAtTheWholeSpanAndZoomInAtTheLimit() {
        TimeAxis a;
        a.setSpan(1'000'000);
        a.setViewport(0, 1000);
        a.zoomAround(500, 0.01);
        QCOMPARE(a.nsPerPixel(), 1000.0);
        a.zoomAround(500, 1e12);
        QCOMPARE(a.nsPerPixel(), TimeAxis::kMinNsPerPixel);
    }

    // Dragging right by 10 px moves every time 10 px to the right.
    void panMovesContent() {
        TimeAxis a;
        a.setSpan(2'000'000);
        a.setViewport(50, 500);
        a.zoomAround(300, 3.0);
        const double before = a.toPixel(1'234'567);
        a.panPixels(10);
        QCOMPARE(a.toPixel(1'234'567), before + 10);
        a.reset();
        QVERIFY(a.isReset());
        QCOMPARE(a.toPixel(2'000'000), 550.0);
    }

    void roundTripsAtEveryZoom() {
        TimeAxis a;
        a.setSpan(987'654'321);
        a.setViewport(170, 1213);
        for (double factor : {1.0, 3.0, 17.0, 1000.0}) {
            a.zoomAround(700, factor);
            for (int64_t t : {int64_t{0}, int64_t{1}, int64_t{123'456'789}, int64_t{987'654'321}}) {
                QCOMPARE(a.toTime(a.toPixel(t)), t);
            }
        }
    }

    // A resize while fully zoomed out keeps the whole span in view.
    void resizeWhileResetRefits() {
        TimeAxis a;
        a.setSpan(1'000'000);
        a.setViewport(0, 1000);
        a.setViewport(0, 500);
        QCOMPARE(a.toPixel(1'000'000), 500.0);
    }
};

QTEST_APPLESS_MAIN(TimeAxisTest)
#include "time_axis_test.moc"
