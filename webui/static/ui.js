// The countdowns of the approvals: the server writes the time left when
// it draws the page; this keeps it true while the page stays open, and
// writes the expiry in the viewer's own zone beside the server's UTC. The
// page works without it.
(function () {
  "use strict";
  function span(s) {
    if (s >= 3600) { return Math.floor(s / 3600) + "h " + Math.floor(s % 3600 / 60) + "m"; }
    if (s >= 60) { return Math.floor(s / 60) + "m " + (s % 60) + "s"; }
    return s + "s";
  }
  function tick() {
    var els = document.querySelectorAll("[data-expires]");
    for (var i = 0; i < els.length; i++) {
      var left = Math.floor((Date.parse(els[i].getAttribute("data-expires")) - Date.now()) / 1000);
      els[i].textContent = left > 0 ? span(left) + " left" : "expired";
      els[i].classList.toggle("expired", left <= 0);
      els[i].classList.toggle("soon", left > 0 && left < 300);
    }
  }
  // local writes a time in the viewer's own zone, as the server writes
  // UTC ("2025-06-01 14:05"), with the zone's name; nothing when the
  // viewer's zone is UTC, which the page says already.
  function local(iso) {
    var f = new Intl.DateTimeFormat("en-US", {year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
      minute: "2-digit", hourCycle: "h23", timeZoneName: "short"});
    var p = {};
    f.formatToParts(new Date(iso)).forEach(function (x) { p[x.type] = x.value; });
    if (p.timeZoneName === "UTC" || p.timeZoneName === "GMT") { return ""; }
    return " (" + p.year + "-" + p.month + "-" + p.day + " " + p.hour + ":" + p.minute + " " + p.timeZoneName + ", your time)";
  }
  document.addEventListener("DOMContentLoaded", function () {
    var els = document.querySelectorAll("[data-local]");
    for (var i = 0; i < els.length; i++) { els[i].textContent = local(els[i].getAttribute("data-local")); }
    tick();
    window.setInterval(tick, 1000);
  });
})();
