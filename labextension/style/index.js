import './row.css';
import './base.css';
import './pictures.css';
