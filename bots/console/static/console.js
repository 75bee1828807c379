// The console's progressive enhancement: charts drawn from JSON blocks in the page (no inline
// script: the Content-Security-Policy allows scripts from this origin only). Pages work
// without it.
"use strict";
(function () {
  var palette = ["#0b57d0", "#b3261e", "#146c2e", "#8430ce", "#b06000", "#00639b", "#5f6368", "#c2185b", "#9e9e9e"];
  function drawCharts() {
    var canvas = document.getElementById("cost-chart");
    var data = document.getElementById("cost-data");
    if (!canvas || !data || !window.Chart) { return; }
    var chart = JSON.parse(data.textContent);
    chart.datasets.forEach(function (d, n) { d.backgroundColor = palette[n % palette.length]; });
    var old = window.Chart.getChart(canvas);
    if (old) { old.destroy(); }
    new window.Chart(canvas, {
      type: "bar",
      data: chart,
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        scales: { x: { stacked: true }, y: { stacked: true, title: { display: true, text: "USD" } } }
      }
    });
  }
  document.addEventListener("DOMContentLoaded", drawCharts);
  document.addEventListener("htmx:afterSettle", drawCharts);
})();
