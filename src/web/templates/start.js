// Fills the start form's time zone with the browser's own (the backend validates it).
try { document.getElementById("time_zone").value = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC"; } catch (e) {}
