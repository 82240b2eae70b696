// Client-side filtering of the risk register by severity, host and free text.
// It only hides rows; it never writes HTML, so host data cannot become markup here.
(function () {
  "use strict";
  var form = document.getElementById("filters");
  var table = document.getElementById("findings-table");
  var counter = document.getElementById("filter-count");
  if (!form || !table) { return; }
  var rows = Array.prototype.slice.call(table.tBodies[0].rows);

  function apply() {
    var severities = {};
    Array.prototype.forEach.call(form.querySelectorAll("input[name=severity]"), function (box) {
      severities[box.value] = box.checked;
    });
    var host = form.elements.host.value;
    var query = form.elements.q.value.trim().toLowerCase();
    var shown = 0;
    rows.forEach(function (row) {
      var visible = severities[row.dataset.severity] !== false &&
        (!host || row.dataset.host === host) &&
        (!query || row.textContent.toLowerCase().indexOf(query) !== -1);
      row.hidden = !visible;
      if (visible) { shown += 1; }
    });
    counter.textContent = shown === rows.length ?
      rows.length + " findings" : "Showing " + shown + " of " + rows.length + " findings (filtered)";
  }

  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  form.addEventListener("submit", function (event) { event.preventDefault(); });
  apply();
})();
