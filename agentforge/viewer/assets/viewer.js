// agentforge view: filters and expansion over the trajectories already in the page (nothing is fetched).
(function () {
  "use strict";
  var outcome = "all";
  var section = "";
  var trajectories = Array.prototype.slice.call(document.querySelectorAll("details.traj"));
  var groups = Array.prototype.slice.call(document.querySelectorAll(".group"));
  var sections = Array.prototype.slice.call(document.querySelectorAll("section.section"));
  var counter = document.getElementById("visible-count");
  var empty = document.getElementById("empty-state");

  function apply() {
    var shown = 0;
    sections.forEach(function (s) {
      var inSection = !section || s.dataset.section === section;
      s.querySelectorAll("details.traj").forEach(function (t) {
        var visible = inSection && (outcome === "all" || t.dataset.outcome === outcome);
        t.hidden = !visible;
        if (visible) { shown += 1; }
      });
    });
    groups.forEach(function (g) { g.hidden = !g.querySelector("details.traj:not([hidden])"); });
    sections.forEach(function (s) { s.hidden = !s.querySelector("details.traj:not([hidden])"); });
    counter.textContent = "showing " + shown + " of " + trajectories.length + " trajectories";
    counter.dataset.shown = String(shown);
    empty.hidden = shown !== 0;
  }

  document.querySelectorAll("input[name=outcome]").forEach(function (input) {
    input.addEventListener("change", function () { outcome = input.value; apply(); });
  });
  document.getElementById("filter-section").addEventListener("change", function (event) {
    section = event.target.value; apply();
  });
  document.getElementById("expand-all").addEventListener("click", function () {
    trajectories.forEach(function (t) { if (!t.hidden) { t.open = true; } });
  });
  document.getElementById("collapse-all").addEventListener("click", function () {
    trajectories.forEach(function (t) { t.open = false; });
  });
  // a link to a trajectory or section (#s0g1t2) opens it
  function follow() {
    var target = location.hash && document.getElementById(location.hash.slice(1));
    if (target && target.tagName === "DETAILS") { target.open = true; }
  }
  window.addEventListener("hashchange", follow);
  apply();
  follow();
}());
